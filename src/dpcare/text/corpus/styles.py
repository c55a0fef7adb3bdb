"""The ``varied`` note style: the same record-grounded discharge summaries, written the ways real notes vary.

Each note draws from its own seeded generator: terse (telegraphic: pt, w/, s/p, c/o, h/o) or narrative
sentences, lower case or not, how often an entity is abbreviated (HTN, CXR, ASA...), header forms (upper
case, inline or on their own line), which sections there are and in what order, list layouts (bullets,
numbers, comma or semicolon lists: each item its own span), negated and uncertain problems ("denies CP",
"r/o PE", "?CHF": problem spans, listed with their i2b2 2010 assertion in ``meta["assertions"]``) and
entities in varied places (drugs in the history, tests in the assessment, problems as indications of
drugs). Symptoms, work-up tests, findings, differentials and typical treatments of the main problem's organ
system are drawn (``phrases.SYSTEMS``); the codes, drugs and measurements come from the record.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

from dpcare.text.corpus import phrases as P
from dpcare.text.corpus.builder import NoteBuilder, Styler
from dpcare.text.corpus.generator import Identity, _Renderer, is_problem
from dpcare.text.corpus.sources import Code, Record, Treatment
from dpcare.text.spans import Note

Writer = Callable[[NoteBuilder], object]
_LIST_BREAK = re.compile(r"[,;\n]")  # never inside a span: list items are split there
_SLOT = re.compile(r"\{(\w+)\}")


def system_of(code: Code | None) -> str:
    """The organ system of a problem: the longest prefix of ``phrases.SYSTEM_OF_PREFIX``, else "general"."""
    if code is None:
        return "general"
    hits = [p for p in P.SYSTEM_OF_PREFIX if code.code.startswith(p)]
    return P.SYSTEM_OF_PREFIX[max(hits, key=len)] if hits else "general"


def _plain(forms) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f.strip() for f in forms if f.strip() and not _LIST_BREAK.search(f)))


def problem_forms(code: Code) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(full, short) ways to write a diagnosis without a comma: its description or the description's head
    (before the first comma, without "Unspecified"); abbreviations and short forms."""
    head = re.sub(r"^Unspecified ", "", code.description.split(",")[0].strip())
    head_lower = head if head[:2].isupper() else head[:1].lower() + head[1:]
    short = _plain(P.PROBLEM_ABBREVIATIONS.get(code.code, ()) + P.PROBLEM_SHORT.get(code.code, ()))
    full = tuple(f for f in _plain((*P.problem_forms(code.code, code.description), head, head_lower))
                 if f not in short)
    return full, short


def treatment_forms(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(full, short) ways to write a treatment: drug or brand name, then standard abbreviations."""
    if name in P.GENERIC_TREATMENTS:
        forms = P.GENERIC_TREATMENTS[name]
        return forms[:1], forms[1:]
    return _plain(P.drug_forms(name)), _plain(P.TREATMENT_ABBREVIATIONS.get(name, ()))


def article(age: int) -> str:
    return "an" if str(age).startswith("8") or age in (11, 18) else "a"


class VariedRenderer(_Renderer):
    """Write one note of a record in the varied style (every choice from the note's ``rng``)."""

    typo_factor = 3.0  # typos per filler word, relative to the corpus' typo_rate

    def __init__(self, rec: Record, ident: Identity, rng: random.Random, style: Styler):
        super().__init__(rec, ident, rng, style)
        self.terse = rng.random() < 0.5
        self.lower = rng.random() < 0.12
        self.short_rate = rng.choice((0.3, 0.55, 0.8))  # how often an entity takes its abbreviation
        self.inline_headers = rng.random() < 0.4
        self.upper_headers = rng.random() < 0.3
        self.system = system_of(self.cc)
        self.symptoms = rng.sample(P.SYSTEMS[self.system]["symptoms"], rng.randint(1, 3))
        main = " ".join(sum(problem_forms(self.cc), ())).lower() if self.cc else ""
        self.negatives = [s for s in P.ROS_NEGATIVES if s not in self.symptoms
                          and not any(f.lower() in main for f in P.SYMPTOMS[s])]  # never deny the main problem
        self.problems = [c for c in (self.cc, *self.course_problems) if c is not None]
        # home drugs: the record's, and some of the usual drugs of the past history (atorvastatin for HLD...)
        usual = dict.fromkeys(d for c in self.pmh for d, pre in P.INDICATIONS.items()
                              if d in P.HOME_DRUGS and c.code.startswith(pre))
        home = [t for t in rec.treatments if t.name in P.HOME_DRUGS]
        home += [Treatment(d, "home") for d in usual if rng.random() < 0.5]
        self.home = list({t.name: t for t in home}.values())
        self.status = [P.STATUS_TREATMENTS[c.code] for c in rec.codes if c.code in P.STATUS_TREATMENTS]
        self.queue = [t.name for t in rec.treatments]  # the record's treatments, named first
        self.assertions: list[list] = []
        self.inline = False
        self.pmh_in_hpi = True
        self.focus: Code | None = None  # the problem the sentence being written is about
        self.paired: dict = {}
        self.used: set[str] = set()
        self.templates.update(terse=int(self.terse), lower=int(self.lower))

    def abbreviation_rate(self) -> float:
        return 0.9 if self.terse else (0.5 if self.abbrev else 0.1)

    # --- entities ------------------------------------------------------------------------------------------
    def choose(self, full: Sequence[str], short: Sequence[str]) -> str:
        if short and (not full or self.rng.random() < self.short_rate):
            return self.rng.choice(short)
        return self.rng.choice(full)

    def entity(self, text: str, label: str, cap: bool = False, assertion: str | None = None) -> Writer:
        text = text[:1].upper() + text[1:] if cap else text

        def write(b: NoteBuilder):
            span = b.entity(text, label)
            if assertion:
                self.assertions.append([span.start, span.end, assertion])
        return write

    def problem(self, code: Code, full: float = 0.3, cap: bool = False) -> Writer:
        return self.entity(self.choose(*problem_forms(code)), "problem", cap)

    def keyed(self, table: dict, key: str, label: str, cap: bool = False, assertion: str | None = None) -> Writer:
        forms = table[key]
        return self.entity(self.choose(forms[:1], forms[1:]), label, cap, assertion)

    def symptom(self, key: str, assertion: str | None = None) -> Writer:
        return self.keyed(P.SYMPTOMS, key, "problem", assertion=assertion)

    def treatment(self, t: Treatment | str, cap: bool = False) -> Writer:
        return self.entity(self.choose(*treatment_forms(getattr(t, "name", t))), "treatment", cap)

    def next_treatment(self) -> str:
        """The record's treatments in turn (some of the time the organ system's usual ones), then those."""
        if self.queue and self.rng.random() < 0.75:
            return self.queue.pop(0)
        return self.rng.choice(P.SYSTEM_TREATMENTS[self.system])

    def treatment_for(self, code: Code) -> str | None:
        """A treatment of ``code``: one of the record's drugs for it, else its usual drug, else its organ
        system's usual treatment (None for a problem of no treated system)."""
        rng = self.rng
        record = [t.name for t in self.rec.treatments if code.code.startswith(P.INDICATIONS.get(t.name, ()))]
        if record and rng.random() < 0.8:
            return rng.choice(record)
        usual = [d for d, prefixes in P.INDICATIONS.items() if code.code.startswith(prefixes)]
        if usual:
            return rng.choice(usual)
        system = system_of(code)
        return rng.choice(P.SYSTEM_TREATMENTS[system]) if system in P.ACUTE_SYSTEMS else None

    def indication(self, name: str) -> Writer | None:
        """A problem of the record the drug treats, else a symptom it relieves, else None."""
        codes = [c for c in self.rec.codes if is_problem(c) and c.code.startswith(P.INDICATIONS.get(name, ()))]
        if codes:
            return self.problem(self.rng.choice(codes))
        symptoms = P.SYMPTOM_INDICATIONS.get(name)
        return self.symptom(self.rng.choice(symptoms)) if symptoms else None

    def med(self, name: str, outpatient: bool, dose_rate: float = 0.8, indicate: float = 0.35,
            in_sentence: bool = False) -> Writer:
        """A medication: name, dose ("25 mg PO BID") or "gtt", sometimes its indication ("for HTN")."""
        rng = self.rng
        prefix = rng.choice(("NEW: ", "cont ")) if outpatient and not in_sentence and rng.random() < 0.15 else ""
        tx = self.treatment(name)
        doses = [d for d in P.DOSES.get(name, ()) if not (outpatient and " IV" in d) and not self.clash(d)]
        dose = rng.choice(doses) if doses and rng.random() < dose_rate else ""
        if not dose and not outpatient and name in P.INFUSIONS and rng.random() < 0.6:
            dose = rng.choice(("gtt", "drip"))
        why = self.indication(name) if rng.random() < indicate else None
        how = " for {p}" if in_sentence else rng.choice((" for {p}", " ({p})", " - {p}", " for {p}"))

        def write(b: NoteBuilder):
            b.text(prefix)
            tx(b)
            if dose:
                b.raw(" " + dose)
            if why:
                b.fill(how, p=why)
        return write

    def status_item(self, entry: tuple[str, tuple[str, ...]]) -> Writer:
        prep, forms = entry
        tx = self.entity(self.rng.choice(forms), "treatment")
        return lambda b: (b.text(prep + " "), tx(b))

    def number(self) -> str:
        options = [n for n in ("2", "3", "4", "5", "7") if not self.clash(n)]
        return self.rng.choice(options or ["several"])

    # --- slots of the templates -------------------------------------------------------------------------------
    def wording(self) -> dict[str, tuple[str, ...]]:
        """Symptoms, tests, findings and differentials of the problem in focus (else of the main problem)."""
        return P.SYSTEMS[system_of(self.focus) if self.focus else self.system]

    def differentials(self) -> list[str]:
        """Differentials of the focus that are not another name of the focus or of the main problem."""
        names = {f.lower() for c in (self.focus, self.cc) if c for f in sum(problem_forms(c), ())}
        keys = [k for k in self.wording()["differentials"]
                if not names & {f.lower() for f in P.DIFFERENTIALS[k]}]
        return keys or ["pe"]

    def pair(self, names: Sequence[str]) -> dict:
        """What the slots of one sentence share: a finding or a differential, a test that shows or rules it
        out, a treatment it gets, a drug held and why."""
        rng, words, pair = self.rng, self.wording(), {}
        treated = "tx" in names

        def pick(keys: Sequence[str], workup: dict) -> str:
            """One not used yet in the note if any, with a treatment when the sentence names one."""
            keys = [k for k in keys if k not in self.used] or list(keys)
            with_tx = [k for k in keys if k in workup and workup[k][1]]
            key = rng.choice(with_tx if treated and with_tx else keys)
            self.used.add(key)
            return key

        if "finding" in names:
            pair["finding"] = pick(words["findings"], P.FINDING_WORKUP)
            tests, treatments = P.FINDING_WORKUP[pair["finding"]]
        elif any(n in names for n in ("ruled", "tneg", "probe", "unc")):
            pair["differential"] = pick(self.differentials(), P.DIFFERENTIAL_WORKUP)
            tests, treatments = P.DIFFERENTIAL_WORKUP[pair["differential"]]
        else:
            tests, treatments = words["tests"], ()
        pair["test"] = pick(tests or words["tests"], {})
        if treated:
            mine = self.treatment_for(self.focus) if self.focus and not treatments else None
            pair["treatment"] = rng.choice(treatments) if treatments else mine or self.next_treatment()
        if "hold_tx" in names:
            codes = [c.code for c in self.rec.codes]
            held = ([t.name for t in self.rec.treatments if t.name in P.HOLDS]
                    or [d for d in P.HOLDS if any(c.startswith(P.INDICATIONS.get(d, ())) for c in codes)])
            pair["held"] = rng.choice(held or list(P.HOLDS))
        return pair

    def say(self, template: str, focus: Code | None = None, **given) -> None:
        """Write ``template`` about the problem ``focus``; each {slot} from ``given`` or else drawn by
        :meth:`slot`."""
        names = _SLOT.findall(template)
        outer, self.focus = self.focus, focus
        self.paired = self.pair(names)
        slots = {name: given[name] if name in given else self.slot(name) for name in names}
        self.focus = outer
        self.b.fill(template, **slots)

    def fresh(self, templates: Sequence[str]) -> str:
        """A template this note has not used yet (any when all are used)."""
        unused = [t for t in templates if t not in self.used]
        template = self.rng.choice(unused or templates)
        self.used.add(template)
        return template

    def about(self, focus: Code | None, acute: Sequence[str], chronic: Sequence[str], quiet: Sequence[str]) -> str:
        """A template for ``focus``: with a work-up (acute organ systems), about its treatment, or neither."""
        if focus is None or system_of(focus) in P.ACUTE_SYSTEMS:
            return self.fresh(acute)
        return self.fresh(chronic if self.treatment_for(focus) is not None else quiet)

    def plan_template(self, focus: Code | None) -> str:
        return self.about(focus, P.VARIED_PROBLEM_PLANS, P.VARIED_CHRONIC_PLANS, P.VARIED_QUIET_PLANS)

    def slot(self, name: str):
        rng, rec, pair, focus = self.rng, self.rec, self.paired, self.focus

        def negated(templates: Sequence[str], assertion: str) -> Writer:
            template = rng.choice(templates)
            p = self.keyed(P.DIFFERENTIALS, pair["differential"], "problem", assertion=assertion)
            return lambda b: b.fill(template, p=p)

        slots = {
            "S": lambda: {"female": "F", "male": "M"}.get(rec.sex, "pt"),
            "sex": lambda: P.SEX_WORDS[rec.sex][0 if rng.random() < 0.6 else 1],
            "a": lambda: article(self.age),
            "age": lambda: self.phi("AGE", str(self.age)),
            "Name": lambda: self.patient_name() if rng.random() < 0.4 else self.pt(True),
            "Pt": lambda: "Pt" if self.terse else self.pt(True),
            "pt": lambda: "pt" if self.terse else self.pt(),
            "pmh": self.pmh_clause,
            "dur": lambda: rng.choice(P.VARIED_DURATIONS[self.terse]).format(n=self.number()),
            "sx": lambda: self.listing([self.symptom(s) for s in self.symptoms]),
            "cc": lambda: self.problem(self.cc) if self.cc else self.symptom(self.symptoms[0]),
            "p": lambda: self.problem(focus or rng.choice(self.problems)) if focus or self.problems
            else self.slot("cc"),
            "P": lambda: self.problem(focus or rng.choice(self.problems), cap=True) if focus or self.problems
            else self.slot("cc"),
            "tx": lambda: self.treatment(pair["treatment"]),
            "txs": lambda: self.listing([self.treatment(n) for n in dict.fromkeys(
                self.next_treatment() for _ in range(rng.randint(1, 3)))]),
            "test": lambda: self.keyed(P.WORKUP_TESTS, pair["test"], "test"),
            "Test": lambda: self.keyed(P.WORKUP_TESTS, pair["test"], "test", cap=True),
            "finding": lambda: self.keyed(P.FINDINGS, pair["finding"], "problem"),
            "result": lambda: rng.choice(P.RESULTS_PLAIN),
            "n": self.number,
            "neg": lambda: self.listing([self.symptom(s, "absent") for s in rng.sample(
                self.negatives, rng.randint(1, 4))], ", ", rng.choice((" or ", ", ", " and "))),
            "ruled": lambda: self.keyed(P.DIFFERENTIALS, pair["differential"], "problem", assertion="absent"),
            "tneg": lambda: negated(P.TEST_NEGATIONS, "absent"),
            "unc": lambda: negated(P.UNCERTAIN_MODIFIERS, "possible"),
            "probe": lambda: negated(P.UNCERTAIN_CLAUSES, "possible"),
            "plan": lambda: (lambda b: self.say(self.plan_template(focus), focus)),
            "hold_tx": lambda: self.treatment(pair["held"]),
            "hold_why": lambda: self.keyed(P.FINDINGS, rng.choice(P.HOLDS[pair["held"]]), "problem"),
        }
        return slots[name]()

    def pmh_clause(self):
        items = [self.problem(c) for c in self.pmh] + [self.status_item(s) for s in self.status]
        if not self.pmh_in_hpi or not items:
            return ""
        intro = self.rng.choice(P.VARIED_PMH_INTROS[self.terse])
        listing = self.listing(items)
        return lambda b: (b.text(intro), listing(b))

    # --- layout --------------------------------------------------------------------------------------------------
    def section_header(self, name: str) -> None:
        header = self.rng.choice(P.VARIED_HEADERS[name])
        header = header.upper() if self.upper_headers else header
        self.inline = self.inline_headers and header.endswith(":")
        self.b.raw(header)

    def lead(self) -> None:
        """What follows a header: a space (inline header) or a line break."""
        self.b.raw(" " if self.inline else "\n")

    def items(self, writers: list[Writer], vertical: float = 0.6) -> None:
        """A list: one item per line after a marker (- * 1. 1) #1), or inline with commas or semicolons."""
        rng, b = self.rng, self.b
        if rng.random() >= vertical:
            self.lead()
            sep = rng.choice(P.INLINE_SEPARATORS)
            b.listing(writers, sep, " and " if sep == ", " and rng.random() < 0.3 else None)
            return
        marker = rng.choice(P.LIST_MARKERS)
        for k, w in enumerate(writers, 1):
            b.raw("\n" + marker.format(k=k))
            w(b)

    # --- sections ------------------------------------------------------------------------------------------------
    def write_cc(self):
        self.lead()
        self.say(self.rng.choice(("{sx}{dur}", "{cc}", "{sx}")))

    def write_hpi(self):
        rng, b = self.rng, self.b
        self.lead()
        self.say(self.fresh(P.VARIED_HPI_OPEN[self.terse]))
        more = P.VARIED_HPI_MORE[self.terse]
        kinds = ["neg", "ed", "ed"] + (["home"] if self.home else [])
        rng.shuffle(kinds)
        for kind in kinds:
            if rng.random() < 0.8:
                b.raw(" ")
                given = {}
                if kind == "home":
                    home = rng.sample(self.home, min(len(self.home), rng.randint(1, 3)))
                    given = {"tx": self.treatment(home[0]),
                             "txs": self.listing([self.med(t.name, True, 0.3, 0.4, in_sentence=True)
                                                  for t in home])}
                self.say(self.fresh(more[kind]), **given)
        vitals = self.measures(self.rec.vitals, P.VITALS, P.VITAL_UNITS)
        if vitals and rng.random() < 0.4:
            b.text(rng.choice((" In ED, vitals ", " VS: ", " Vitals on arrival: ")))
            b.listing(vitals[:5], ", ", None)
            b.raw(".")

    def write_pmh(self):
        items = [self.problem(c) for c in self.pmh] + [self.status_item(s) for s in self.status]
        if items:
            self.items(items)
        else:
            self.lead()
            self.b.text(self.rng.choice(("None.", "No significant PMH.", "Denies.")))

    def write_home_meds(self):
        self.items([self.med(t.name, True) for t in self.home])

    def write_ros(self):
        self.lead()
        self.say(self.rng.choice(P.VARIED_ROS))

    def write_studies(self):
        rng, b = self.rng, self.b
        lines: list[Writer] = []
        labs = self.measures(self.rec.labs, P.LABS)[:rng.randint(3, 8)]
        if labs and rng.random() < 0.8:
            sep = rng.choice((", ", " / ", "; "))
            lines.append(lambda b: b.listing(labs, sep, None))
        for _ in range(rng.randint(1, 3)):
            template = rng.choice(P.VARIED_STUDY_LINES)
            lines.append(lambda b, t=template: self.say(t))
        if rng.random() < 0.5:
            for w in lines:
                b.raw("\n")
                w(b)
        else:
            self.lead()
            b.listing(lines, rng.choice((". ", "; ")), None)

    def write_course(self):
        rng, b = self.rng, self.b
        by_problem = rng.random() < (0.7 if self.terse else 0.25)  # one line per problem
        if not by_problem or rng.random() < 0.5:
            self.lead()
            self.say(self.fresh(P.VARIED_COURSE_OPEN[self.terse]))
        if by_problem:
            lines = [lambda b, c=c: self.say(rng.choice(P.VARIED_PROBLEM_LINES), c) for c in self.problems[:5]]
            if rng.random() < 0.35:
                lines.append(lambda b: self.say(rng.choice(("{ruled}: ruled out w/ {test}.",
                                                            "r/o {ruled}: {test} neg."))))
            if not lines:
                lines = [lambda b: self.say("{cc}: {plan}")]
            self.items(lines, vertical=1.0)
        else:
            for c in self.course_problems[:3]:
                b.raw(" ")
                self.say(self.about(c, P.VARIED_COURSE_SENTENCES, P.VARIED_COURSE_CHRONIC, P.VARIED_COURSE_QUIET), c)
            for _ in range(rng.randint(1, 2)):  # about the main problem's work-up, not naming it again
                b.raw(" ")
                self.say(self.fresh([t for t in P.VARIED_COURSE_SENTENCES if "{p}" not in t.lower()]), self.cc)
        sep = "\n" if by_problem else " "
        first = [n for n in self.queue if n in {t.name for t in self.rec.treatments[:3]}]
        if first:
            b.raw(sep)
            sep = " "
            self.say(rng.choice(("{Pt} also received {txs}.", "Also got {txs}.", "Other tx: {txs}.")),
                     txs=self.listing([self.treatment(n) for n in first]))
        trends = [m for m in self.rec.labs if m.key in P.LABS and m.first != m.last]
        if trends and rng.random() < 0.5:
            m = rng.choice(trends)
            names, decimals = P.LABS[m.key]
            a, z = (f"{v:.{decimals}f}" if decimals else str(round(v)) for v in (m.first, m.last))
            if a != z and not self.clash(f"{a} {z}"):
                b.raw(sep)
                sep = " "
                b.fill(rng.choice(P.LAB_TRENDS), t=self.test(names), a=a, z=z)
        b.raw(sep)
        if self.died:
            b.fill(rng.choice(P.DEATH), pt=self.pt(), d=self.dated(self.discharge))
        else:
            b.text(rng.choice(("Stable for d/c.", f"Discharged in {self.condition} condition.",
                               "Pt improved and was d/c'd.")))

    def write_ap(self):
        self.lead()
        self.say(self.rng.choice(P.VARIED_AP_OPEN[self.terse]))
        codes = self.problems[:4] + self.pmh[:1]
        self.items([lambda b, c=c: self.say(self.rng.choice(P.VARIED_PROBLEM_LINES), c) for c in codes]
                   or [lambda b: self.say("{cc}: {plan}")], vertical=1.0)

    def write_dx(self):
        writers = [self.problem(c) for c in self.rec.codes if is_problem(c)][:10]
        if writers:
            self.items(writers)
        else:
            self.lead()
            self.b.text("see above")

    def write_dc_meds(self):
        self.items([self.med(n, True) for n in self.discharge_drugs()])

    def write_dispo(self):
        self.lead()
        self.dispo()

    def discharge_drugs(self) -> list[str]:
        return list(dict.fromkeys(t.name for t in self.rec.treatments if t.name in P.DISCHARGE_DRUGS))[:10]

    # --- the whole note --------------------------------------------------------------------------------------------
    def plan(self) -> list[str]:
        rng = self.rng
        names = ["hpi"]
        if rng.random() < 0.4:
            names.insert(0, "cc")
        if (self.pmh or self.status) and rng.random() < 0.55:
            names.append("pmh")
        if self.home and rng.random() < 0.5:
            names.append("home_meds")
        if rng.random() < 0.45:
            names.append("ros")
        names += ["studies", "course"] if rng.random() < 0.6 else ["course", "studies"]
        if rng.random() < 0.4:
            names.append("ap")
        tail = ["dx"]
        if not self.died and self.discharge_drugs() and rng.random() < 0.75:
            tail.append("dc_meds")
        tail.append("dispo")
        if rng.random() < 0.2:
            names.insert(0, tail.pop(0))  # diagnoses first
        return names + tail

    def render(self) -> Note:
        b, rng, rec = self.b, self.rng, self.rec
        self.header()
        plan = self.plan()
        self.pmh_in_hpi = "pmh" not in plan
        self.templates["sections"] = "/".join(plan)
        sections: dict[str, list[int]] = {}
        b.lower = self.lower
        for name in plan:
            b.raw("\n\n" if rng.random() < 0.25 else "\n")
            self.section_header(name)
            start = b.pos
            getattr(self, "write_" + name)()
            sections[name] = [start, b.pos]
        b.lower = False
        b.raw("\n")
        self.footer()
        course = sections["course"]
        meta = self.meta(sections)
        meta.update(style="varied", assertions=sorted(self.assertions))
        return b.build(rec.record_id, rec.patient_id, icd_codes=tuple(c.code for c in rec.codes),
                       summary_source=b.value()[course[0]:course[1]].strip(), summary_target=self.summary(),
                       meta=meta)
