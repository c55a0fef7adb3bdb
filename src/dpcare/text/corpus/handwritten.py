"""Hand-written notes for evaluation only (issue 55 part 2): 16 short clinical notes written for dpcare, not
generated and not copied from any corpus, in styles the generator's templates do not produce (headers, lists,
abbreviations, misspellings, telegraphic sign-outs, nursing and consult notes). Every name, date and number is
invented. Gold entities follow the i2b2 2010 concept types: ``problem`` (diseases, symptoms, findings),
``treatment`` (drugs, procedures, devices, therapies) and ``test`` (labs, imaging, exams, vital signs measured).

Markup: ``{label|words}`` marks one entity; :func:`handwritten_notes` strips it and records each span's exact
offsets. Never train on these notes: they measure how far a model trained on generated notes transfers.
"""

from __future__ import annotations

import re

from dpcare.exceptions import DataError
from dpcare.text.spans import ENTITY_LABELS, Note, Span

MARKUP = re.compile(r"\{(problem|treatment|test)\|([^{}|]+)\}")

NOTES: tuple[str, ...] = (
    # 1: admission H&P, headers and abbreviations
    """HPI: 67 y/o M w/ hx of {problem|CAD} s/p {treatment|CABG} x3 (2019), {problem|HTN}, {problem|DM2} presents w/
{problem|SOB} and {problem|orthopnea} x 4 days. Reports {problem|3-pillow orthopnea}, denies {problem|CP}.
PMH: as above + {problem|CKD stage 3}.
Meds: {treatment|metoprolol succinate} 50 daily, {treatment|lisinopril} 20, {treatment|metformin} 1000 BID.
Exam: JVP to angle of jaw, {problem|bibasilar crackles}, {problem|2+ pitting edema} to knees.
Labs: {test|BNP} 1840, {test|Cr} 1.9 (baseline 1.4), {test|K} 5.1.
{test|CXR}: {problem|pulmonary vascular congestion}, small {problem|bilateral effusions}.
A/P: {problem|acute on chronic HFrEF exacerbation}. {treatment|IV furosemide} 80 BID, strict I/Os, daily weights.
Hold {treatment|metformin} given {problem|AKI}. {test|TTE} in AM.""",
    # 2: telegraphic sign-out, a list
    """Sign-out 7N bed 12
- {problem|pna} RLL, on {treatment|ceftriaxone}/{treatment|azithro} day 2, afebrile since noon
- f/u {test|blood cx} (NGTD x24h)
- {problem|hyponatremia} 128 -> 131 w/ {treatment|fluid restriction}, recheck {test|BMP} at 0400
- if {problem|desats} <88% on 4L, call RT, consider {treatment|BiPAP}
Code status: full""",
    # 3: ED note with misspellings
    """ED NOTE. 34F c/o {problem|abd pain} RLQ since last nite, {problem|nausea}, one episode of {problem|emesis}.
No {problem|dysuria}. LMP 2 wks ago. {test|Urine hcg} neg. {test|WBC} 14.2.
{test|CT abd/pelvis} w contrast: {problem|appendicitis} w/o {problem|perforation}.
Given {treatment|morphine} 4mg IV, {treatment|zofran} 4mg. Surgery consulted for {treatment|lap appy}.
Pt understands plan, NPO.""",
    # 4: discharge summary in prose, brand names and dosing
    """Discharge summary. Mrs Ellery was admitted with {problem|cellulitis} of the left lower leg after a
{problem|scratch from a garden fence}. She was treated with {treatment|cefazolin} 2 g every 8 hours and the
{problem|erythema} receded within 48 hours. {test|Blood cultures} remained negative. Her {problem|diabetes} was
poorly controled ({test|A1c} 9.8%) and {treatment|insulin glargine} was started at 10 units nightly. She goes home
on {treatment|cephalexin} 500 mg four times daily to complete 7 days. Follow up with her PCP in one week.""",
    # 5: nursing note
    """Nursing 0300: pt restless, pulling at lines. {test|BP} 162/94, {test|HR} 104, {test|SpO2} 95% RA.
{test|Blood glucose} 58 -> given {treatment|D50} 1 amp per protocol, recheck 112. MD aware of {problem|agitation},
{treatment|haloperidol} 0.5 mg IV given w/ effect. {treatment|Foley} draining clear yellow urine. Will cont to monitor.""",
    # 6: ICU progress note, SOAP headers
    """S: intubated, sedated on {treatment|propofol}.
O: {test|Tmax} 38.9. {test|MAP} 58 on {treatment|norepinephrine} 0.12. {test|Lactate} 4.1 -> 2.6.
{test|ABG} 7.29/48/71 on FiO2 60%. {test|CXR} w/ new {problem|LLL consolidation}.
A: {problem|septic shock} from {problem|VAP}, {problem|ARDS} (P/F 118).
P: broaden to {treatment|vancomycin} + {treatment|meropenem}, {test|sputum culture}, {treatment|low tidal volume ventilation},
{treatment|prone positioning} if P/F <150 persists.""",
    # 7: outpatient clinic letter
    """Dear Dr Okafor, I saw Mr Lindqvist today for follow-up of his {problem|atrial fibrillation}. He has had no
{problem|palpitations} since the {treatment|cardioversion} in March. {test|ECG} today shows sinus rhythm, rate 62.
He remains on {treatment|apixaban} 5 mg twice daily and {treatment|diltiazem} 120 mg. His {test|echo} showed a
mildly dilated left atrium. I have not changed anything and will see him in six months.""",
    # 8: consult note, heavy abbreviations
    """Renal c/s: 58M w/ {problem|ESRD} on {treatment|HD} MWF via L {treatment|AVF}, missed Fri session.
{test|K} 6.7, {test|ECG} w/ {problem|peaked T waves}. Got {treatment|Ca gluconate} 1g, {treatment|insulin}/{treatment|dextrose},
{treatment|albuterol} neb in ED. Rec: urgent {treatment|HD} today, 2K bath, {test|repeat K} post-HD.
{problem|Volume overload} mild, UF goal 2L.""",
    # 9: pediatric note
    """Peds: 4 yo with {problem|fever} to 39.4 x2 days, {problem|ear pulling}, {problem|decreased PO intake}.
Exam: R {problem|TM bulging} and erythematous. {test|Rapid strep} neg. Dx {problem|acute otitis media}.
Rx {treatment|amoxicillin} 90 mg/kg/day divided BID x 10d, {treatment|ibuprofen} prn. Return if {problem|rash} or
not better in 48-72h.""",
    # 10: operative note
    """Procedure: {treatment|laparoscopic cholecystectomy}. Indication: {problem|symptomatic cholelithiasis}.
Findings: {problem|distended gallbladder} with {problem|pericholecystic inflammation}, no {problem|CBD stones} on
{test|intraop cholangiogram}. EBL 20 mL. Specimen to path. {treatment|Ketorolac} given at closure.
Dispo: PACU then home if tolerating diet.""",
    # 11: psychiatry note, prose with negations
    """Psych f/u. Pt reports improved mood on {treatment|sertraline} 100 mg, sleeping 6-7 h. Denies {problem|SI}/{problem|HI}.
{test|PHQ-9} 8 (from 19). Still some {problem|anxiety} in crowded places, working w/ therapist on {treatment|CBT}.
No {problem|tremor} or {problem|GI upset}. Plan: cont current dose, {test|TSH} was nl in May.""",
    # 12: a problem list
    """Problem list
1. {problem|COPD} - GOLD 3, on {treatment|tiotropium} + {treatment|budesonide/formoterol}; {test|PFTs} 2023 FEV1 41%
2. {problem|Chronic hypoxemic resp failure} - {treatment|home O2} 2L
3. {problem|Osteoporosis} - {treatment|alendronate} weekly, {test|DEXA} due
4. {problem|Tobacco use} - 40 pk-yr, quit 2021""",
    # 13: neurology, time-critical
    """Stroke alert 14:05. 71F LKW 12:50, {problem|L facial droop}, {problem|R arm weakness}, {problem|aphasia}.
{test|NIHSS} 11. {test|CT head} neg for {problem|hemorrhage}; {test|CTA} w/ {problem|L M1 occlusion}.
{treatment|tPA} bolus 14:32, to IR for {treatment|thrombectomy}. {test|Glucose} 134.""",
    # 14: GI note with misspelled drug
    """GI: 45M w {problem|melena} x2d, {problem|lightheadedness}. {test|Hgb} 7.2 (prior 13). On {treatment|ibuprofin} for
{problem|back pain}. {treatment|EGD}: 1.5 cm {problem|duodenal ulcer} w/ visible vessel, treated w/
{treatment|epinephrine injection} + {treatment|clips}. Start {treatment|pantoprazole} 40 IV BID, stop NSAIDs,
{test|H pylori biopsy} sent. Transfuse 1u {treatment|PRBC}.""",
    # 15: obstetric note
    """L&D: G2P1 at 38w3d, {problem|contractions} q4min, {test|cervix} 5/90/0. {test|GBS} pos -> {treatment|penicillin G}.
{test|FHR} baseline 140, moderate variability, no decels. Requests {treatment|epidural}. {test|BP} 148/96,
{test|protein/creatinine ratio} pending to r/o {problem|preeclampsia}.""",
    # 16: home health visit, informal
    """Home visit: Mr D doing ok, says his {problem|legs are more swollen} this wk. Weight up 3 lb.
Taking his {treatment|lasix} most days but "forgets the evening one". {test|Lungs} clear. Reviewed low-salt diet,
{treatment|pill organizer} set up. Will ask PCP about {test|labs} - last {test|BMP} 2 months ago.""",
)


def parse_markup(marked: str) -> tuple[str, tuple[Span, ...]]:
    """The note's text without markup and its entity spans (exact offsets)."""
    text, spans, last = [], [], 0
    length = 0
    for m in MARKUP.finditer(marked):
        before = marked[last:m.start()]
        text.append(before)
        length += len(before)
        label, words = m.group(1), m.group(2)
        spans.append(Span(length, length + len(words), label, words))
        text.append(words)
        length += len(words)
        last = m.end()
    text.append(marked[last:])
    out = "".join(text)
    if "{" in out or "}" in out:
        raise DataError(f"unparsed markup left in a hand-written note: {out[:60]!r}")
    return out, tuple(spans)


def handwritten_notes() -> list[Note]:
    """The 16 hand-written evaluation notes, each its own patient (hw01 ... hw16)."""
    notes = []
    for i, marked in enumerate(NOTES, start=1):
        text, spans = parse_markup(marked)
        notes.append(Note(f"hw{i:02d}", f"hw{i:02d}", text, entities=spans,
                          meta={"source": "hand-written for evaluation (dpcare.text.corpus.handwritten)"}))
    return notes


__all__ = ["ENTITY_LABELS", "NOTES", "handwritten_notes", "parse_markup"]
