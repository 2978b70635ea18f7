"""The ``--remote_rm_url`` options, mixed into the configs of the recipes that take a reward
(SeRL, SPIN online). Light to import: nothing here loads torch."""

from __future__ import annotations

from dataclasses import dataclass

from serl import ConfigError
from serl.config.options import option


@dataclass
class RemoteRewardOptions:
    remote_rm_url: str = option(
        "",
        "OpenRLHF reward instead of the built-in one: an http(s) URL of a reward "
        "server (POST {query, prompts, labels} -> {rewards}; e.g. serl "
        "serve-reward) or a .py file with reward_func(queries, prompts, labels); "
        "'' = the built-in reward of --reward_mode",
    )
    remote_rm_timeout: float = option(
        60.0,
        "seconds one reward request (reply included), or one call of a reward "
        "file's reward_func, may take; a call past it is stopped and the run "
        "stops, naming the file",
    )
    remote_rm_retries: int = option(
        3,
        "retries of a failed reward request (back-off 0.5 s, doubling); then "
        "the run stops, naming the URL, with no step trained on missing rewards",
    )
    remote_rm_batch_size: int = option(
        0, "samples per reward request, whole prompt groups kept together (0 = a step's samples in one request)"
    )

    def validate_remote_reward(self) -> None:
        from serl.rewards.remote import check_spec

        if self.remote_rm_url:
            why = check_spec(self.remote_rm_url)
            if why:
                raise ConfigError(f"remote_rm_url: {why}")
        if not self.remote_rm_timeout > 0:
            raise ConfigError(f"remote_rm_timeout: must be > 0, got {self.remote_rm_timeout}")
        if self.remote_rm_retries < 0 or self.remote_rm_batch_size < 0:
            raise ConfigError("remote_rm_retries / remote_rm_batch_size: must be >= 0")
