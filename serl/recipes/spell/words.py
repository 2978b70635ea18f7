"""The words SPELL's offline documents are made of (:mod:`serl.recipes.spell.docs`): first
names, syllables for invented names, products, professions and filler sentences, and the
factory that never hands out the same name twice."""

from __future__ import annotations

import random

FIRST_NAMES = [
    "Mira",
    "Tobin",
    "Elsa",
    "Joren",
    "Ilka",
    "Bastian",
    "Noor",
    "Petra",
    "Caius",
    "Lene",
    "Odile",
    "Ravi",
    "Suna",
    "Teodor",
    "Vela",
    "Wim",
    "Yara",
    "Zeno",
    "Agnes",
    "Bram",
    "Cleo",
    "Dario",
    "Edda",
    "Finn",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kaia",
    "Lior",
    "Maren",
    "Nils",
    "Orla",
    "Pim",
    "Quirin",
    "Rhea",
    "Sven",
    "Tilde",
]
_ONSETS = [
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "qu",
    "r",
    "s",
    "sk",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "w",
    "z",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou", "ea"]
_CODAS = ["", "n", "r", "l", "s", "k", "m", "th", "rn", "sk"]
_TOWN_ENDS = ["moor", "vale", "ford", "wick", "stead", "haven", "by", "ton", "mere", "holt"]
_SURNAME_ENDS = ["vane", "rick", "ston", "berg", "ley", "dell", "mont", "wood", "ard", "ling", "son", "ell", "and"]
_COMPANY_KINDS = ["Works", "Mills", "Foundry", "Trading", "Crafts", "Brothers", "Cooperative"]
PRODUCTS = [
    "glass bottles",
    "wool blankets",
    "bicycle parts",
    "canned fish",
    "clay roof tiles",
    "paper lanterns",
    "copper pipes",
    "ship ropes",
    "oak barrels",
    "garden tools",
    "wax candles",
    "leather boots",
    "tin toys",
    "goat cheese",
    "printed maps",
]
PROFESSIONS = [
    "teacher",
    "carpenter",
    "nurse",
    "baker",
    "engineer",
    "librarian",
    "fisher",
    "pharmacist",
    "architect",
    "weaver",
    "surveyor",
    "beekeeper",
    "printer",
    "potter",
    "clockmaker",
]
TOWN_FILLER = [
    "A stone bridge crosses the river near the old mill.",
    "Its market square hosts a fair every autumn.",
    "Most houses in the old quarter have red tiled roofs.",
    "A narrow railway line connects it to the coast.",
    "The town is known for its long winters.",
]
COMPANY_FILLER = [
    "Its workshops are open to visitors once a year.",
    "Much of what it makes is sold abroad.",
    "The firm is still owned by the family that started it.",
    "It moved into a larger building a few years ago.",
]
PERSON_FILLER = [
    "In the evenings {first} likes to walk along the river.",
    "{first} plays the violin in a local band.",
    "Friends describe {first} as patient and curious.",
    "{first} keeps a small vegetable garden.",
]


class NameFactory:
    """Invented names, never the same one twice in a corpus (so splits are disjoint)."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set[str]()

    def _syllable(self) -> str:
        r = self.rng
        return r.choice(_ONSETS) + r.choice(_VOWELS) + r.choice(_CODAS)

    def _fresh(self, make) -> str:
        for _ in range(1000):
            name = make()
            if name.lower() not in self.used and 4 <= len(name) <= 14:
                self.used.add(name.lower())
                return name
        raise RuntimeError("name space exhausted; widen the syllable lists")

    def town(self) -> str:
        return self._fresh(lambda: (self._syllable() + self.rng.choice(_TOWN_ENDS)).capitalize())

    def river(self) -> str:
        return self._fresh(lambda: self._syllable().capitalize())

    def surname(self) -> str:
        r = self.rng
        return self._fresh(
            lambda: (r.choice(_ONSETS) + r.choice("aeiou") + r.choice(_CODAS) + r.choice(_SURNAME_ENDS)).capitalize()
        )

    def person(self) -> str:
        return f"{self.rng.choice(FIRST_NAMES)} {self.surname()}"

    def company(self) -> str:
        return f"{self.surname()} {self.rng.choice(_COMPANY_KINDS)}"
