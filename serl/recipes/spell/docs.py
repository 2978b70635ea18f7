"""A deterministic generator of small document clusters about fictional entities.

This is the offline corpus for the SPELL recipe (Yang et al., "SPELL: Self-Play
Reinforcement Learning for Evolving Long-Context Language Models", Tongyi-Zhiwen
2025), written by us in the spirit of :mod:`serl.data.arith`: no download, seeded,
small enough for a 135M model's context.

Each cluster describes one small world:

* a **town** (founding year, population, river, mayor),
* a **company** (founding year, staff, product, headquarters town, founder),
* two **people**: the town's mayor and the company's founder (birth year,
  profession, home town, number of children),
* two **distractors**: another town and another company of the same shape, not
  linked to the four above, so a reader must follow the right names.

Documents are single paragraphs that name each other ("... founded by Mira
Tolvane"), so some questions need two documents (two-hop). Every entity name is
unique across the whole corpus, so held-out clusters share no entity with the
training clusters, and the names are invented, so a question cannot be answered
from what a model already knows.

Files written by ``python -m serl.recipes.spell.docs [FOLDER]`` into ``dataset/`` (one JSON object a
line):

``docs_train.jsonl`` and ``docs_heldout.jsonl``
    ``{"cluster", "doc", "kind", "distractor", "title", "text"}``; read them with
    ``serl.recipes.spell.corpus.read_corpus(path)`` (text key ``text``, cluster key
    ``cluster``).
``docs_heldout_qa.jsonl``
    ``{"cluster", "question", "answer", "hops", "kind", "evidence"}``: gold single-
    and two-hop questions on the held-out clusters; ``evidence`` lists doc ids.
``docs_heldout_verify.jsonl``
    ``{"cluster", "question", "candidate", "gold", "label", "kind"}``: labelled
    items for the verifier (``label`` is ``"yes"`` when ``candidate`` states the
    same answer as ``gold``, else ``"no"``), half of each.
``docs_train_verify.jsonl``
    the same kind of items on the **training** clusters (drawn from their own RNG, so
    the other files do not change): what the SPELL recipe's verifier warm-up
    (``--verifier_warmup_steps``) trains on.

The held-out labels are for evaluation only; self-play sees the documents alone.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from serl.recipes.spell.words import COMPANY_FILLER, PERSON_FILLER, PRODUCTS, PROFESSIONS, TOWN_FILLER, NameFactory


@dataclass
class Town:
    name: str
    founded: int
    population: int
    river: str
    mayor: str


@dataclass
class Company:
    name: str
    founded: int
    employees: int
    product: str
    hq: str
    founder: str


@dataclass
class Person:
    name: str
    born: int
    profession: str
    home: str
    children: int

    @property
    def first(self) -> str:
        return self.name.split()[0]


@dataclass
class World:
    """One cluster: linked core entities plus unlinked distractors."""

    town: Town
    company: Company
    mayor: Person
    founder: Person
    other_town: Town
    other_company: Company


def _distinct_years(rng: random.Random, spans: list[tuple[int, int]]) -> list[int]:
    out: list[int] = []
    for lo, hi in spans:
        y = rng.randint(lo, hi)
        while y in out:
            y = rng.randint(lo, hi)
        out.append(y)
    return out


def _fmt(n: int) -> str:
    return f"{n:,}" if n >= 10000 else str(n)


def make_world(rng: random.Random, names: NameFactory) -> World:
    t_year, c_year, m_born, f_born, ot_year, oc_year = _distinct_years(
        rng, [(1150, 1890), (1860, 2015), (1935, 1995), (1935, 1995), (1150, 1890), (1860, 2015)]
    )
    pops = rng.sample(range(900, 60000, 10), 2)
    staff = rng.sample(range(12, 4800), 2)
    prods = rng.sample(PRODUCTS, 2)
    profs = rng.sample(PROFESSIONS, 2)
    kids = rng.sample(range(1, 6), 2)
    town_name, other_town_name = names.town(), names.town()
    mayor = Person(names.person(), m_born, profs[0], town_name, kids[0])
    founder = Person(names.person(), f_born, profs[1], town_name, kids[1])
    town = Town(town_name, t_year, pops[0], names.river(), mayor.name)
    company = Company(names.company(), c_year, staff[0], prods[0], town_name, founder.name)
    other_town = Town(other_town_name, ot_year, pops[1], names.river(), names.person())
    other_company = Company(names.company(), oc_year, staff[1], prods[1], other_town_name, names.person())
    return World(town, company, mayor, founder, other_town, other_company)


def _town_text(rng: random.Random, t: Town) -> str:
    first = rng.choice(
        [
            f"{t.name} is a town on the banks of the {t.river} river.",
            f"The {t.river} river runs through the town of {t.name}.",
        ]
    )
    founded = rng.choice([f"It was founded in {t.founded}.", f"The town was established in {t.founded}."])
    pop = rng.choice([f"Today it has {_fmt(t.population)} inhabitants.", f"Its population is {_fmt(t.population)}."])
    mayor = rng.choice([f"The current mayor of {t.name} is {t.mayor}.", f"{t.mayor} serves as the mayor of {t.name}."])
    return " ".join([first, founded, pop, rng.choice(TOWN_FILLER), mayor])


def _company_text(rng: random.Random, c: Company) -> str:
    first = rng.choice([f"{c.name} is a company that makes {c.product}.", f"{c.name} produces {c.product}."])
    founded = rng.choice(
        [f"It was founded in {c.founded} by {c.founder}.", f"{c.founder} started the company in {c.founded}."]
    )
    hq = rng.choice(
        [
            f"The company has its headquarters in {c.hq} and employs {_fmt(c.employees)} people.",
            f"Its head office is in {c.hq}, where {_fmt(c.employees)} people work.",
        ]
    )
    return " ".join([first, founded, hq, rng.choice(COMPANY_FILLER)])


def _person_text(rng: random.Random, p: Person) -> str:
    born = rng.choice([f"{p.name} was born in {p.born}.", f"{p.name} was born in the year {p.born}."])
    work = rng.choice(
        [
            f"{p.first} works as a {p.profession} and lives in {p.home}.",
            f"{p.first} lives in {p.home}, working as a {p.profession}.",
        ]
    )
    kids = "1 child" if p.children == 1 else f"{p.children} children"
    family = rng.choice([f"{p.first} has {kids}.", f"{p.first} is the parent of {kids}."])
    return " ".join([born, work, family, rng.choice(PERSON_FILLER).format(first=p.first)])


def cluster_docs(rng: random.Random, w: World, cluster_id: str) -> list[dict]:
    """The six documents of a world, in a seeded random order."""
    items = [
        ("town", False, w.town.name, _town_text(rng, w.town)),
        ("company", False, w.company.name, _company_text(rng, w.company)),
        ("person", False, w.mayor.name, _person_text(rng, w.mayor)),
        ("person", False, w.founder.name, _person_text(rng, w.founder)),
        ("town", True, w.other_town.name, _town_text(rng, w.other_town)),
        ("company", True, w.other_company.name, _company_text(rng, w.other_company)),
    ]
    rng.shuffle(items)
    return [
        {
            "cluster": cluster_id,
            "doc": f"{cluster_id}-{i}",
            "kind": kind,
            "distractor": dis,
            "title": title,
            "text": text,
        }
        for i, (kind, dis, title, text) in enumerate(items)
    ]


# --- gold questions -------------------------------------------------------------------
# Each entry: (kind, hops, question template, answer getter, evidence titles, answer type).
# Answer types drive the verifier candidates: "year", "count", "person", "town", "text".
def _questions(w: World) -> list[tuple]:
    t, c, m, f = w.town, w.company, w.mayor, w.founder
    return [
        ("town_founded", 1, f"In what year was {t.name} founded?", str(t.founded), [t.name], "year"),
        ("town_population", 1, f"How many people live in {t.name}?", str(t.population), [t.name], "count"),
        ("town_river", 1, f"Which river flows through {t.name}?", t.river, [t.name], "river"),
        ("town_mayor", 1, f"Who is the mayor of {t.name}?", m.name, [t.name], "person"),
        ("company_founded", 1, f"In what year was {c.name} founded?", str(c.founded), [c.name], "year"),
        ("company_employees", 1, f"How many people does {c.name} employ?", str(c.employees), [c.name], "count"),
        ("company_product", 1, f"What does {c.name} make?", c.product, [c.name], "product"),
        ("company_founder", 1, f"Who founded {c.name}?", f.name, [c.name], "person"),
        ("person_born", 1, f"In what year was {f.name} born?", str(f.born), [f.name], "year"),
        ("person_profession", 1, f"What is the profession of {m.name}?", m.profession, [m.name], "profession"),
        ("person_children", 1, f"How many children does {f.name} have?", str(f.children), [f.name], "children"),
        ("founder_born", 2, f"In what year was the founder of {c.name} born?", str(f.born), [c.name, f.name], "year"),
        (
            "founder_profession",
            2,
            f"What is the profession of the person who founded {c.name}?",
            f.profession,
            [c.name, f.name],
            "profession",
        ),
        (
            "hq_river",
            2,
            f"Which river flows through the town where {c.name} has its headquarters?",
            t.river,
            [c.name, t.name],
            "river",
        ),
        (
            "hq_population",
            2,
            f"How many people live in the town where {c.name} is headquartered?",
            str(t.population),
            [c.name, t.name],
            "count",
        ),
        (
            "hq_founded",
            2,
            f"In what year was the town that hosts the head office of {c.name} founded?",
            str(t.founded),
            [c.name, t.name],
            "year",
        ),
        ("mayor_born", 2, f"In what year was the mayor of {t.name} born?", str(m.born), [t.name, m.name], "year"),
        (
            "mayor_children",
            2,
            f"How many children does the mayor of {t.name} have?",
            str(m.children),
            [t.name, m.name],
            "children",
        ),
    ]


def _wrong_answer(rng: random.Random, w: World, kind: str, gold: str) -> str:
    """A plausible wrong answer of the same type, preferably one that appears in the cluster."""
    t, c, m, f, ot, oc = w.town, w.company, w.mayor, w.founder, w.other_town, w.other_company
    if kind == "children":
        pool: list = [m.children, f.children, int(gold) + 1, max(1, int(gold) - 1)]
    else:
        by_kind: dict[str, list] = {
            "year": [t.founded, c.founded, m.born, f.born, ot.founded, oc.founded],
            "count": [t.population, c.employees, ot.population, oc.employees],
            "person": [m.name, f.name, ot.mayor, oc.founder],
            "river": [t.river, ot.river],
            "product": [c.product, oc.product],
            "profession": [m.profession, f.profession],
        }
        pool = by_kind[kind]
    options = [str(x) for x in pool if str(x) != gold]
    return rng.choice(options)


def _phrase(rng: random.Random, kind: str, ans: str) -> str:
    """The answer as a reader might write it; same meaning, different surface."""
    if kind == "year":
        return rng.choice([ans, f"in {ans}", f"the year {ans}", f"It was {ans}."])
    if kind == "count":
        n = int(ans)
        return rng.choice([f"{n:,}", f"{n} people", f"{n}."])
    if kind == "children":
        return rng.choice([f"{ans} children" if ans != "1" else "1 child", ans, f"{ans}."])
    if kind == "river":
        return rng.choice([f"the {ans} river", f"The {ans}.", f"{ans} river"])
    return rng.choice([ans, f"It is {ans}.", ans.lower(), f"{ans}."])


def heldout_items(
    rng: random.Random, w: World, cluster_id: str, docs: list[dict], n_single: int = 3, n_double: int = 3
) -> tuple[list[dict], list[dict]]:
    """Gold questions (n_single one-hop + n_double two-hop) and two verifier items each."""
    by_title = {d["title"]: d["doc"] for d in docs}
    qs = _questions(w)
    singles = rng.sample([q for q in qs if q[1] == 1], n_single)
    doubles = rng.sample([q for q in qs if q[1] == 2], n_double)
    qa, verify = [], []
    for kind, hops, question, answer, ev, atype in singles + doubles:
        qa.append(
            {
                "cluster": cluster_id,
                "question": question,
                "answer": answer,
                "hops": hops,
                "kind": kind,
                "evidence": [by_title[x] for x in ev],
            }
        )
        right = _phrase(rng, atype, answer)
        wrong = _phrase(rng, atype, _wrong_answer(rng, w, atype, answer))
        pair = [(right, "yes"), (wrong, "no")]
        rng.shuffle(pair)
        for cand, label in pair:
            verify.append(
                {
                    "cluster": cluster_id,
                    "question": question,
                    "candidate": cand,
                    "gold": answer,
                    "label": label,
                    "kind": kind,
                }
            )
    return qa, verify


def make_corpus(n_train: int = 48, n_heldout: int = 20, seed: int = 2025) -> dict[str, list[dict]]:
    """All five files' rows. Entity names are unique across both splits."""
    rng = random.Random(seed)
    names = NameFactory(rng)
    out: dict[str, list[dict]] = {"train": [], "heldout": [], "qa": [], "verify": [], "train_verify": []}
    worlds = []
    for i in range(n_train):
        w = make_world(rng, names)
        docs = cluster_docs(rng, w, f"train-{i:03d}")
        out["train"].extend(docs)
        worlds.append((w, docs))
    for i in range(n_heldout):
        w = make_world(rng, names)
        cid = f"heldout-{i:03d}"
        docs = cluster_docs(rng, w, cid)
        qa, verify = heldout_items(rng, w, cid, docs)
        out["heldout"].extend(docs)
        out["qa"].extend(qa)
        out["verify"].extend(verify)
    train_rng = random.Random(seed + 1_000_003)  # its own stream: the four other files stay as they were
    for i, (w, docs) in enumerate(worlds):
        out["train_verify"].extend(heldout_items(train_rng, w, f"train-{i:03d}", docs)[1])
    return out


FILES = {
    "train": "docs_train.jsonl",
    "heldout": "docs_heldout.jsonl",
    "qa": "docs_heldout_qa.jsonl",
    "verify": "docs_heldout_verify.jsonl",
    "train_verify": "docs_train_verify.jsonl",
}


def write(root: str | Path, n_train: int = 48, n_heldout: int = 20, seed: int = 2025) -> list[Path]:
    """Write the five files into ``root``; returns their paths."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rows = make_corpus(n_train, n_heldout, seed)
    paths = []
    for key, name in FILES.items():
        p = root / name
        with open(p, "w", encoding="utf-8") as fh:
            for row in rows[key]:
                fh.write(json.dumps(row) + "\n")
        paths.append(p)
    return paths


if __name__ == "__main__":
    import sys

    from serl.shipped import shipped_dir

    # into the given folder, else into serl's own dataset/ (the checkout's, in a checkout)
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else shipped_dir("dataset")):
        print(path)
