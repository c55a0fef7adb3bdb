"""Generated discharge summaries grounded in real records, with gold annotations.

The notes are GENERATED, not real clinical notes: their facts (ICD-10-CM diagnoses, medications,
labs, vitals, age, sex, admission type, length of stay, disposition) come from real records
(MIMIC-IV demo stays, SUPPORT2 and RHC rows, see dpcare.text.corpus.sources) and their identifiers
(names, dates, record numbers, hospitals, phones, addresses) from Faker. Each note carries its
patient id: the privacy unit downstream.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dpcare.exceptions import MissingDependencyError, SettingsError, UnknownNameError
from dpcare.text.corpus import phrases as P
from dpcare.text.corpus.builder import NoteBuilder, Styler
from dpcare.text.corpus.sources import SOURCES, Code, Record, Treatment, load_records
from dpcare.text.spans import Note, name_parts, phi_leaks, phi_pattern

ERAS = {"mimic_demo": (2008, 2022), "support2": (1989, 1994), "rhc": (1989, 1994)}
DATE_FORMATS: tuple[Callable[[dt.date], str], ...] = (
    lambda d: f"{d.month}/{d.day}/{d.year}", lambda d: d.isoformat(),
    lambda d: f"{d:%B} {d.day}, {d.year}", lambda d: f"{d:%m/%d/%y}",
    lambda d: f"{d.day} {d:%b} {d.year}",
)
HOSPITAL_FORMS = ("{city} General Hospital", "{city} Medical Center", "{last} Memorial Hospital",
                  "St. {first}'s Hospital", "{city} Regional Medical Center",
                  "{last} Community Hospital", "University Hospital of {city}")
MAX_TRIES = 50
STYLES = ("templates", "varied")  # note styles: the published templates, or styles.VariedRenderer
RACE_WORDS = {"white": "white", "black": "Black", "black or african american": "African American",
              "asian": "Asian", "hispanic": "Hispanic"}


@lru_cache(maxsize=1)
def _faker():
    try:
        from faker import Faker
    except ImportError:
        raise MissingDependencyError("generated notes need Faker: pip install 'dpcare[text]'") from None
    return Faker("en_US")


@dataclass(frozen=True)
class Identity:
    """Fake identifiers of one patient, shared by all their notes."""

    first: str
    last: str
    mrn: str
    street: str
    city: str
    state: str
    zip: str
    phone: str
    clinic_phone: str
    hospital: str
    pcp: str
    first_admit: dt.date
    dob: dt.date


def _hospital(fake, rng: random.Random) -> str:
    return rng.choice(HOSPITAL_FORMS).format(city=fake.city(), last=fake.last_name(),
                                             first=fake.first_name())


def _identity(rec: Record, rng: random.Random) -> Identity:
    fake = _faker()
    fake.seed_instance(rng.getrandbits(32))
    first = {"female": fake.first_name_female, "male": fake.first_name_male}.get(
        rec.sex, fake.first_name)()
    lo, hi = ERAS[rec.source]
    first_admit = dt.date(lo, 1, 1) + dt.timedelta(days=rng.randrange((hi - lo + 1) * 365))
    age = rec.age if rec.age is not None else rng.randint(40, 85)
    dob = first_admit - dt.timedelta(days=int(age * 365.25) + rng.randrange(365))
    return Identity(first=first, last=fake.last_name(), mrn=fake.numerify("#" * rng.choice((7, 8))),
                    street=fake.street_address(), city=fake.city(), state=fake.state_abbr(),
                    zip=fake.zipcode(), phone=fake.phone_number(),
                    clinic_phone=fake.phone_number(), hospital=_hospital(fake, rng),
                    pcp=f"{fake.first_name()} {fake.last_name()}", first_admit=first_admit, dob=dob)


def is_problem(code: Code) -> bool:
    """Codes that are i2b2 2010 problems: all but external causes (V-Y) and Z factors."""
    return code.code[:1] not in "VWXYZ"


def _fmt(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}" if decimals else str(round(value))


class _Renderer:
    """Write one note for one record (all random choices from ``rng``)."""

    typo_factor = 1.0  # typos per filler word, relative to the corpus' typo_rate

    def __init__(self, rec: Record, ident: Identity, rng: random.Random, style: Styler):
        self.rec, self.ident, self.rng = rec, ident, rng
        self.b = NoteBuilder(style)
        self.templates: dict[str, int] = {}
        self.date = rng.choice(DATE_FORMATS)
        self.admit = ident.first_admit + dt.timedelta(days=int(rec.day))
        los = rec.los_days if rec.los_days is not None else rng.choice((2, 3, 4, 5, 6, 7, 9, 12, 16))
        self.los = max(0, round(los))
        self.discharge = self.admit + dt.timedelta(days=self.los)
        self.age = rec.age if rec.age is not None else (self.admit - ident.dob).days // 365
        self.avoid = phi_pattern(str(self.age))
        self.disposition = rec.disposition or rng.choices(
            ("home", "snf", "rehab", "hospice"), weights=(6, 2, 1, 1))[0]
        self.died = self.disposition == "expired"
        fake = _faker()
        fake.seed_instance(rng.getrandbits(32))
        self.doctor = f"{fake.first_name()} {fake.last_name()}"
        problems = [c for c in rec.codes if is_problem(c)]
        self.cc = problems[0] if problems else None
        rest = problems[1:]
        chronic = [c for c in rest if c.code[:1] in "EFGIJKLMN"]
        self.pmh = rng.sample(chronic, min(len(chronic), rng.randint(1, 3))) if chronic else []
        others = [c for c in rest if c not in self.pmh]
        self.course_problems = rng.sample(others, min(len(others), rng.randint(1, 4))) if others else []
        self.abbrev = rng.random() < 0.5
        self.condition = rng.choice(P.CONDITION)

    def abbreviation_rate(self) -> float:
        """How often the styler abbreviates a filler word (pt, hx, w/...)."""
        return 0.6 if self.abbrev else 0.0

    # --- small writers ---------------------------------------------------------------------
    def pick(self, name: str, options: Sequence):
        i = self.rng.randrange(len(options))
        self.templates[name] = i
        return options[i]

    def clash(self, text: str) -> bool:
        """A number that would read as the patient's age outside the AGE span."""
        return bool(self.avoid.search(text))

    def phi(self, label: str, text: str):
        return lambda b: b.phi_span(text, label)

    def dated(self, day: dt.date, short: bool = False):
        text = f"{day.month}/{day.day}" if short else self.date(day)
        return self.phi("DATE", text)

    def problem(self, code: Code, full: float = 0.3):
        forms = P.problem_forms(code.code, code.description)
        text = forms[0] if self.rng.random() < full else self.rng.choice(forms)
        return lambda b: b.entity(text, "problem")

    def treatment(self, t: Treatment):
        text = self.rng.choice(P.drug_forms(t.name))
        return lambda b: b.entity(text, "treatment")

    def test(self, names: Sequence[str]):
        text = self.rng.choice(names)
        return lambda b: b.entity(text, "test")

    def listing(self, writers: list, sep: str = ", ", last: str | None = " and "):
        return lambda b: b.listing(writers, sep, last)

    def pt(self, capital: bool = False):
        """Refer to the patient: a pronoun, 'the patient' or title + surname (PHI)."""
        r = self.rng.random()
        if r < 0.3:
            title = P.TITLE_OF[self.rec.sex]
            return lambda b: (b.text(title + " "), b.phi_span(self.ident.last, "PATIENT"))
        if r < 0.55 and self.rec.sex:
            word = {"female": "she", "male": "he"}[self.rec.sex]
        else:
            word = "the patient"
        word = word[:1].upper() + word[1:] if capital else word
        return word

    def patient_name(self):
        first, last = self.ident.first, self.ident.last
        text = self.pick("name_form", (f"{first} {last}", f"{last}, {first}",
                                       f"{last.upper()}, {first.upper()}", f"{first} {last}"))
        return self.phi("PATIENT", text)

    def measures(self, items, table, units: dict[str, str] | None = None) -> list:
        """Writers 'name value' for measures whose value does not clash with the age."""
        out = []
        by_key = {m.key: m for m in items}
        if "sbp" in by_key and "dbp" in by_key:
            text = f"{_fmt(by_key['sbp'].first, 0)}/{_fmt(by_key['dbp'].first, 0)}"
            if not self.clash(text):
                out.append(self._measure(("BP", "blood pressure"), text))
        for m in items:
            if m.key not in table:
                continue
            names, decimals = table[m.key]
            text = _fmt(m.first, decimals)
            unit = (units or {}).get(m.key, "")
            if not self.clash(text):
                out.append(self._measure(names, text + unit))
        return out

    def _measure(self, names, value: str):
        name = self.test(names)
        sep = self.rng.choice((" ", ": ", " ", " of "))
        return lambda b: (name(b), b.raw(sep + value))

    # --- sections --------------------------------------------------------------------------
    def header(self):
        b, ident, i = self.b, self.ident, self.rng
        title = self.pick("title", P.TITLES)
        sex = {"female": "F", "male": "M"}.get(self.rec.sex, "U")
        services = ("MEDICINE", "Medicine", "Internal Medicine")
        slots = {"title": title, "name": self.patient_name(), "sex": sex,
                 "mrn": self.phi("MEDICALRECORD", ident.mrn), "admit": self.dated(self.admit),
                 "disch": self.dated(self.discharge), "dob": self.dated(ident.dob),
                 "doctor": self.phi("DOCTOR", self.doctor), "hosp": self.phi("HOSPITAL", ident.hospital),
                 "street": self.phi("STREET", ident.street), "city": self.phi("CITY", ident.city),
                 "state": self.phi("STATE", ident.state), "zip": self.phi("ZIP", ident.zip),
                 "phone": self.phi("PHONE", ident.phone), "service": i.choice(services),
                 "acct": self.phi("IDNUM", f"{i.choice('ABHKV')}{i.randrange(10**7, 10**8)}")}
        b.fill(self.pick("header", P.HEADER_TEMPLATES), **slots)

    def hpi(self):
        rec, rng = self.rec, self.rng
        sex_words = P.SEX_WORDS[rec.sex]
        pmh = self.listing([self.problem(c) for c in self.pmh])
        clause = " " + rng.choice(P.PMH_INTROS) + " "
        pmh_clause = (lambda b: (b.text(clause), pmh(b))) if self.pmh else " with no significant PMH"
        pmh_sentence = ((lambda b: (b.text(" Past history is significant for "), pmh(b), b.raw(".")))
                        if self.pmh else " No significant past medical history.")
        cc = self.problem(self.cc) if self.cc else "evaluation"
        race = RACE_WORDS.get((rec.race or "").lower(), "")
        race = race + " " if race and rng.random() < 0.5 else ""
        via = rng.choice(P.ADMISSION.get(rec.admission, P.ADMISSION["ed"]))
        article = "an" if str(self.age).startswith("8") or self.age in (11, 18) else "a"
        self.b.fill(
            self.pick("hpi", P.HPI_TEMPLATES), name=self.patient_name(), a=article,
            age=self.phi("AGE", str(self.age)), sex=sex_words[0 if rng.random() < 0.6 else 1],
            sexl=sex_words[3] or sex_words[0], pmh_clause=pmh_clause, pmh_sentence=pmh_sentence,
            via=via, cc=cc, date=self.dated(self.admit), title=P.TITLE_OF[rec.sex],
            last=self.phi("PATIENT", self.ident.last), hosp=self.phi("HOSPITAL", self.ident.hospital),
            race=race)
        if rec.extras.get("transferred"):
            other = _hospital(_faker(), rng)
            self.b.fill(" {pt} was transferred from {hosp} for further care.", pt=self.pt(True),
                        hosp=self.phi("HOSPITAL", other))
        cats = rec.extras.get("admission_categories")
        if cats:
            self.b.text(f" Admission problem categories: {', '.join(cats)}.")
        n_co = rec.extras.get("num_comorbidities")
        if n_co and not self.clash(str(round(n_co))):
            self.b.text(f" {round(n_co)} comorbid conditions were documented.")
        vitals = self.measures(rec.vitals, P.VITALS, P.VITAL_UNITS)
        if vitals:
            rng.shuffle(vitals)
            when = rec.extras.get("measured_on")
            intro = f" On {when}, vital signs were " if when else " " + self.pick("vitals",
                                                                                   P.VITALS_INTROS)
            self.b.text(intro)
            self.b.listing(vitals[:6], ", ", None)
            self.b.raw(".")
        if any(t.group in ("vasoactives", "sedation", "paralytics") for t in rec.treatments):
            self.b.fill(" {pt} was admitted to the intensive care unit.", pt=self.pt(True))

    def course(self):
        rng, rec, b = self.rng, self.rec, self.b
        problem_style = rng.random() < 0.35
        self.templates["course_style"] = int(problem_style)
        groups: dict[str, list[Treatment]] = defaultdict(list)
        for t in rec.treatments:
            groups[t.group if t.group in P.GROUP_PHRASES else "other"].append(t)
        cc = self.problem(self.cc) if self.cc else "further evaluation"
        if problem_style:
            lines = [(cc, rec.treatments[:2])] + [(self.problem(c), []) for c in self.course_problems]
            for k, (writer, txs) in enumerate(lines):
                b.raw("\n# " if k else "# ")
                b.fill("{p}: ", p=writer)
                if txs:
                    b.fill(rng.choice(P.COURSE_BY_PROBLEM_TX),
                           tx=self.listing([self.treatment(t) for t in txs]))
                else:
                    b.text(rng.choice(P.COURSE_BY_PROBLEM))
            sep = "\n"
        else:
            b.fill(self.pick("course_open", P.COURSE_OPENINGS), Pt=self.pt(True), cc=cc)
            for c in self.course_problems:
                b.fill(" " + rng.choice(P.COURSE_PROBLEM), Pt=self.pt(True), p=self.problem(c))
            sep = " "
        for group, txs in list(groups.items())[:5]:
            b.raw(sep)
            b.fill(rng.choice(P.GROUP_PHRASES[group]), pt=self.pt(True),
                   tx=self.listing([self.treatment(t) for t in txs[:4]]))
            sep = " "
        trends = [m for m in rec.labs if m.key in P.LABS and m.first != m.last]
        for m in rng.sample(trends, min(len(trends), 2)):
            names, decimals = P.LABS[m.key]
            first, last = _fmt(m.first, decimals), _fmt(m.last, decimals)
            if first != last and not self.clash(f"{first} {last}"):
                b.raw(sep)
                b.fill(rng.choice(P.LAB_TRENDS), t=self.test(names), a=first, z=last)
                sep = " "
        if rec.extras.get("right_heart_catheter"):
            b.raw(sep)
            sep = " "
            b.fill("A {t} was performed on {d}.", t=self.test(
                ("right heart catheterization", "Swan-Ganz catheterization", "PA catheter placement")),
                d=self.dated(self.admit + dt.timedelta(days=rng.randrange(max(1, min(self.los, 3)))),
                             short=True))
        b.raw(sep)
        if self.died:
            b.fill(rng.choice(P.DEATH), pt=self.pt(), d=self.dated(self.discharge))
        elif self.los and not self.clash(str(self.los)) and rng.random() < 0.4:
            b.fill("By hospital day {n}, {pt} was stable for discharge.", n=str(self.los),
                   pt=self.pt())
        else:
            dispo = P.DISPOSITIONS[self.disposition][2]  # discharged / transferred / left ...
            verb = "" if dispo.startswith("left") else "was "
            b.fill("{Pt} " + verb + dispo + " on {d} in {c} condition.", Pt=self.pt(True),
                   d=self.dated(self.discharge), c=self.condition)

    def labs(self):
        items = self.measures(self.rec.labs, P.LABS)
        if not items:
            self.b.text(self.rng.choice(("No laboratory results recorded.", "Labs not available.")))
            return
        n = min(len(items), self.rng.randint(4, 10))
        chosen = items[:n]
        style = self.pick("labs_style", (", ", "\n", " / ", "; "))
        if style == "\n":
            self.b.raw("\n")
        self.b.listing(chosen, style, None)

    def meds(self):
        txs = self.rec.treatments
        if not txs:
            self.b.text(self.rng.choice(("None recorded during this admission.",
                                         "Home medications were resumed.", "No new medications.")))
            return
        writers = [self.treatment(t) for t in txs[:12]]
        style = self.pick("meds_style", ("numbered", "bullets", "inline"))
        if style == "inline":
            self.b.listing(writers, ", ", None)
            return
        for k, w in enumerate(writers, 1):
            self.b.raw(f"\n{k}. " if style == "numbered" else "\n- ")
            w(self.b)

    def dx(self):
        rec, b = self.rec, self.b
        style = self.pick("dx_style", ("numbered", "primary_secondary", "inline", "bullets_codes"))
        with_codes = style == "bullets_codes"

        def item(c: Code):
            def write(b: NoteBuilder):
                if is_problem(c):
                    self.problem(c, full=0.6)(b)
                else:
                    b.raw(c.description)
                if with_codes:
                    b.raw(f" ({c.code[:3]}.{c.code[3:]})" if len(c.code) > 3 else f" ({c.code})")
            return write

        writers = [item(c) for c in rec.codes]
        if style == "inline":
            b.listing(writers, "; ", None)
        elif style == "primary_secondary":
            b.text("\nPrimary: ")
            writers[0](b)
            if len(writers) > 1:
                b.text("\nSecondary: ")
                b.listing(writers[1:], "; ", None)
        else:
            for k, w in enumerate(writers, 1):
                b.raw(f"\n{k}. " if style == "numbered" else "\n- ")
                w(b)

    def dispo(self):
        word = self.rng.choice(P.DISPOSITIONS[self.disposition][:2])
        self.b.text(word + "\nDischarge condition: " +
                    ("deceased" if self.died else self.condition))

    def footer(self):
        b, rng = self.b, self.rng
        if not self.died:
            b.raw("\n\n")
            b.fill(self.pick("followup", P.FOLLOW_UP), pcp=self.phi("DOCTOR", self.ident.pcp), hosp=self.phi("HOSPITAL", self.ident.hospital),
                phone=self.phi("PHONE", self.ident.clinic_phone))
        b.raw("\n\n")
        b.fill(self.pick("signature", P.SIGNATURES), doc=self.phi("DOCTOR", self.doctor), d=self.dated(self.discharge),
            job=self.phi("IDNUM", str(rng.randrange(10**5, 10**6))))
        b.raw("\n")

    # --- the whole note --------------------------------------------------------------------
    def render(self) -> Note:
        b, rng = self.b, self.rng
        self.header()
        order = self.pick("order", P.SECTION_ORDERS)
        inline = rng.random() < 0.4
        self.templates["inline_headers"] = int(inline)
        sections: dict[str, list[int]] = {}
        for name in order:
            b.raw("\n")
            b.raw(self.pick(f"h_{name}", P.HEADERS[name]))
            b.raw(" " if inline else "\n")
            start = b.pos
            getattr(self, name)()
            sections[name] = [start, b.pos]
            b.raw("\n")
        self.footer()
        text_so_far = b.value()
        course = sections["course"]
        return b.build(
            self.rec.record_id, self.rec.patient_id,
            icd_codes=tuple(c.code for c in self.rec.codes),
            summary_source=text_so_far[course[0]:course[1]].strip(),
            summary_target=self.summary(),
            meta=self.meta(sections),
        )

    def summary(self) -> str:
        rec = self.rec
        dx = "; ".join(c.description for c in rec.codes)
        via = P.ADMISSION.get(rec.admission, P.ADMISSION["ed"])[0]
        main = self.cc.description if self.cc else "evaluation"
        txs = list(dict.fromkeys(t.name for t in rec.treatments))[:3]
        treated = f"; treated with {', '.join(txs)}" if txs else ""
        outcome = P.DISPOSITIONS[self.disposition][2]
        days = f" after {self.los} day{'s' if self.los != 1 else ''}" if self.los else ""
        return (f"Discharge diagnoses: {dx}\nSummary: Admitted {via} with "
                f"{main[:1].lower() + main[1:]}{treated}; {outcome}{days}.")

    def meta(self, sections: dict[str, list[int]]) -> dict:
        rec = self.rec
        course = sections["course"]
        return {
            "generated": True, "source": rec.source, "record_id": rec.record_id,
            **{k: v for k, v in rec.extras.items() if k == "hospitalization_id"},
            "sections": sections, "summary_source_span": course, "templates": self.templates,
            "grounded": {"los": rec.los_days is not None, "disposition": rec.disposition is not None,
                         "treatments": any(t.group != "typical" for t in rec.treatments)},
        }


def _renderer(style: str) -> type[_Renderer]:
    if style == "varied":
        from dpcare.text.corpus.styles import VariedRenderer  # it builds on _Renderer

        return VariedRenderer
    return _Renderer


def _render_patient(records: Sequence[Record], seed: int, typo_rate: float,
                    style: str = "templates") -> list[Note]:
    """All notes of one patient, redrawn (identity and wording) until no PHI string leaks."""
    pid = records[0].patient_id
    renderer_class = _renderer(style)
    for attempt in range(MAX_TRIES):
        rng = random.Random(f"{seed}:{pid}:{attempt}")
        ident = _identity(records[0], rng)
        notes = []
        for rec in records:
            note_rng = random.Random(f"{seed}:{rec.record_id}:{attempt}")
            styler = Styler(note_rng, random.Random(f"{seed}:typo:{rec.record_id}:{attempt}"), abbrev_rate=0.0,
                            typo_rate=min(1.0, typo_rate * renderer_class.typo_factor))
            renderer = renderer_class(rec, ident, note_rng, styler)
            styler.abbrev_rate = renderer.abbreviation_rate()
            note = renderer.render()
            note.meta.update(attempt=attempt, n_typos=styler.n_typos)
            notes.append(note)
        if not any(phi_leaks(n, name_parts(n)) or _target_leaks(n) for n in notes):
            return notes
    raise RuntimeError(f"could not generate notes for {pid} without PHI leaks in {MAX_TRIES} tries")


def _target_leaks(note: Note) -> bool:
    values = {s.text for s in note.phi} | name_parts(note)
    return any(phi_pattern(v).search(note.summary_target) for v in values)


def _allocate(n_notes: int | None, available: dict[str, int]) -> dict[str, int]:
    """Split ``n_notes`` evenly over the sources, handing what one cannot use to the others."""
    if n_notes is None:
        return dict(available)
    quota = dict.fromkeys(available, 0)
    left = n_notes
    while left > 0:
        open_ = [s for s in available if quota[s] < available[s]]
        if not open_:
            break
        share = max(1, left // len(open_))
        for s in open_:
            take = min(share, available[s] - quota[s], left)
            quota[s] += take
            left -= take
    return quota


def generate_corpus(n_notes: int | None = None, sources: Iterable[str] = SOURCES, seed: int = 0,
                    typo_rate: float = 0.01, style: str = "templates") -> list[Note]:
    """Generated discharge summaries with gold PHI, problem/treatment/test spans, ICD-10-CM codes
    and a summarisation pair. ``mimic_demo``: one note per MIMIC-IV demo hospitalisation with
    ICD-10-CM codes (several per patient); ``support2``/``rhc``: one note per row (patient = row).
    ``n_notes`` (default: all) is split evenly over the sources; rows and patients are drawn at
    random with ``seed``. Notes are ordered by source, then patient. ``style``: "templates" (the
    published corpora, unchanged) or "varied" (abbreviations, list and header layouts, negated and
    uncertain problems, terse and lower-case notes; dpcare.text.corpus.styles)."""
    if style not in STYLES:
        raise UnknownNameError(f"unknown note style {style!r}; choose from {STYLES}")
    sources = tuple(sources)
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise UnknownNameError(f"unknown note source(s) {unknown}; choose from {SOURCES}")
    if n_notes is not None and n_notes < 1:
        raise SettingsError(f"n_notes must be positive, got {n_notes}")
    if not 0 <= typo_rate <= 1:
        raise SettingsError(f"typo_rate must lie in [0, 1], got {typo_rate}")
    by_patient: dict[str, dict[str, list[Record]]] = {}
    for s in sources:
        groups: dict[str, list[Record]] = defaultdict(list)
        for rec in load_records(s):
            groups[rec.patient_id].append(rec)
        by_patient[s] = dict(groups)
    quota = _allocate(n_notes, {s: sum(map(len, g.values())) for s, g in by_patient.items()})
    notes: list[Note] = []
    for s in sources:
        patients = sorted(by_patient[s])
        if quota[s] < sum(map(len, by_patient[s].values())):
            random.Random(f"{seed}:order:{s}").shuffle(patients)
        chosen: list[list[Record]] = []
        left = quota[s]
        for p in patients:
            if left <= 0:
                break
            chosen.append(by_patient[s][p][:left])
            left -= len(chosen[-1])
        for recs in sorted(chosen, key=lambda r: _natural(r[0].patient_id)):
            notes.extend(_render_patient(recs, seed, typo_rate, style))
    return notes


def _natural(pid: str) -> tuple:
    src, _, rest = pid.partition(":")
    return (src, int(rest)) if rest.isdigit() else (src, 0, rest)


def save_jsonl(notes: Iterable[Note], path: str | os.PathLike) -> Path:
    """Write one JSON object per note (spans as {start, end, label, text}), atomically."""
    from dpcare.text.readers import write_jsonl

    return write_jsonl(notes, path)


def load_jsonl(path: str | os.PathLike) -> list[Note]:
    """Read notes written by save_jsonl (spans checked against the text)."""
    from dpcare.text.readers import read_jsonl

    return read_jsonl(path)
