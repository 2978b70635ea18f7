"""SPIN: self-play fine-tuning (real vs. generated answers) and online DPO (best vs. worst).

SPIN: Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language Models to Strong
Language Models". Online DPO: the verl recipe inspired by SPIN. Its preference pairs are
:mod:`.pairs`.
"""
