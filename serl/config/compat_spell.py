"""SPELL's own config names (its verl-based trainer's ``key=value`` overrides) with ``--recipe spell``.

``spell_words(key, value, argv)`` -> serl's words for one override, or None when ``key`` is not one of
SPELL's names (the verl table in ``serl.config.compat_flags`` then decides). docs/compat.md's SPELL
table lists them; what has no serl meaning is refused with the reason.
"""

from __future__ import annotations

import sys

from serl import ConfigError

BAND = ("self_verification.update_lower_bound", "self_verification.update_upper_bound")
BAND_DEFAULT = ("0.51", "0.99")  # SPELL's and serl's --verifier_band


def _note(key: str, value: str, why: str) -> None:
    print(f"serl: note: {key}={value}: {why}", file=sys.stderr)


def _given(argv: list[str], key: str) -> str | None:
    for a in argv:
        name, eq, value = a.lstrip("+").partition("=")
        if eq and name == key:
            return value
    return None


def spell_words(key: str, value: str, argv: list[str]) -> list[str] | None:
    low = value.strip().lower()
    if key == "reward_combined_function":  # the responder's reward: rule score and verifier majority
        if low != "max":
            raise ConfigError(
                f"{key}: serl combines the rule score and the verifier's majority by max (SPELL's "
                f"default); --responder_reward rule scores by the rule alone; got {value!r}"
            )
        return ["--responder_reward", "max"]
    if key in BAND:  # both bounds make serl's one option; each may come alone
        lo = _given(argv, BAND[0]) or BAND_DEFAULT[0]
        hi = _given(argv, BAND[1]) or BAND_DEFAULT[1]
        return ["--verifier_band", lo, hi] if key == BAND[0] or _given(argv, BAND[0]) is None else []
    if key == "self_verification.label_type":
        if low != "maj_cons":
            raise ConfigError(
                f"{key}: serl trains the verifier on its majority's verdict where it agrees with "
                f"the rule score (maj_cons); got {value!r}"
            )
        _note(key, value, "serl's verifier labels are the majority's verdict agreeing with the rule (maj_cons)")
        return []
    if key == "self_verification.enable":
        if low in ("true", "1"):
            return []
        raise ConfigError(
            f"{key}: serl's SPELL always trains its verifier; --responder_reward rule keeps the "
            f"verifier out of the responder's reward"
        )
    if key in ("data.train_files", "data.corpus"):  # SPELL's documents are serl's corpus
        if value.endswith(".parquet") and not any(
            a.startswith(("--corpus_text_key", "--corpus_cluster_key")) for a in argv
        ):
            _note(
                key,
                value,
                "read as --corpus; SPELL's own layout (a cluster a row, its documents in "
                "'paragraphs') needs --corpus_text_key paragraphs --corpus_cluster_key question_id",
            )
        return ["--corpus", value]
    if key == "data.val_files":
        raise ConfigError(
            f"{key}: serl's SPELL evaluates on its held-out files (--eval_docs, --eval_qa_data, "
            f"--eval_verify_data); SPELL's benchmarks need the hub and a judge model"
        )
    return None
