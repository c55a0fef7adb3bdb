"""Words a sensitive-span masker keeps public: stop-words, clinical vocabulary, drug names.

``safe_vocabulary()`` is the lower-cased union of spaCy's English stop-words, the curated lists
below (section headers, clinical words, letter-digit codes, units), every word of the wording in
``dpcare.text.corpus.phrases`` (lab, vital, drug and problem names), the one-word names of the drug
dictionary (drug-named-entity-recognition) and the ICD-10-CM description words; common first and
last names and month and weekday names are taken out again (curated words and stop-words stay).
``CLINICAL_ACRONYMS`` are matched in upper case only; ``CLINICAL_TERMS`` (Foley, Echo, NICU...)
in any case, and never count as names. A safe word only vetoes a weak cue (an entity
the model proposed, an unknown acronym or code); context rules (a title, a name field, an
identifier) mask whatever they find.
"""

from __future__ import annotations

import re
from functools import cache

from dpcare.exceptions import MissingDependencyError
from dpcare.text.corpus import phrases as P


def _set(block: str) -> frozenset[str]:
    return frozenset(block.split())


# section headers and note layout
SECTION_WORDS = _set("""
history present illness hpi chief complaint cc hospital course brief problem pertinent results
labs laboratory data medications meds treatments diagnosis diagnoses dx final primary secondary
disposition dispo discharged discharge admission admit admitted date dates birth dob sex service
summary note physician attending dictated signed electronically job encounter unit acct account
address phone clinic follow up followup f/u name patient pt review systems ros exam examination
physical assessment plan impression allergies social family past medical surgical vitals vital
signs condition instructions procedures procedure consults consult studies imaging reason
addendum signature report continued ssn ip fax tel email e-mail pager mobile cell
""")
# everyday clinical words a general NER model mistakes for names or places
CLINICAL_WORDS = _set("""
acute chronic severe mild moderate stable unstable improved resolved worsening fair good poor
deceased expired home hospice rehab rehabilitation facility nursing skilled medicine internal
emergency department intensive care icu clinic pressors vasopressor sedation analgesia
antibiotics empiric workup labs sat saturation comfort measures family outpatient inpatient
serial trended serum arterial venous ionized total alkaline count ratio catheterization
ventilation intubation anticoagulation comorbid comorbidities catheter normal saline diet non
gastro neuro cardio pulm renal
regular activity ambulate ambulating tolerated tolerating afebrile hemodynamically old yo
alert oriented awake soft nontender nondistended normocephalic atraumatic nl wnl cont extr ext
extremities diff consultation consultations dept maleate succinate tartrate besylate mesylate
hydrochloride hcl sulfate citrate acetylsalicylic tablet tablets capsule capsules ok bedside
""")
# acronyms that carry clinical meaning, not identity (compared in upper case)
CLINICAL_ACRONYMS = _set("""
AB ABG ACE ACS AF AFIB AKI ALT AMA ANA ARB ARDS ARF ASA AST AV BID BIPAP BMI BMP BNP BP BPM BUN CABG
CMO DOB GOC HFNC HFPEF HFREF MRN NASH NC NRB NYHA SIRS ST
CAD CBC CCU CHF CK CKD CMP CNS COPD CPAP CPR CRP CSF CT CTA CVA CVP CXR DKA DM DNI DNR DVT ECG ECHO
ED EEG EF EGD EKG ENT ER ESRD ETOH FFP GCS GERD GFR GI GU HCO HCT HD HEENT HGB HIV HLD HR HTN IBD
ICD ICU ID IM INR IR IV IVF JVD LDH LFT LLE LLQ LOS LTACH LUE LUQ LVEF MAP MCV MD MEDS MI MICU MRI
MRSA NAD NG NGT NIV NKA NKDA NPO NS NSAID NSTEMI OR OSA OT PA PCA PCP PE PEA PEEP PEG PERRLA PET
PICC
PMH PNA PO PPI PR PRBC PRN PT PTT PVD QD QHS QID RA RBC RLE RLQ RN RR RRR RUE RUQ RV SBP SICU SNF
SOB STAT STEMI TB TEE TIA TID TPN TSH TTE UA UGIB URI US UTI VAP VBG VS VTE WBC DO NP RT SLP
NICU PICU CVICU LAD LCX RCA PDA OM SVG LIMA MCA ACA NIHSS RVR CIWA COWS NSR SVT VT VF PVC PAC
RBBB LBBB IVCD LVH RVH AVF AVL QRS QTC LV LA AS AR MR TR PR RDW MCH MCHC ESR METS MIBI PERRL ROM
II III IV TICI UVC UAC SI HI LR NT ND NABS CTAB EOMI IDDM NIDDM FLP LBP DJD OA CHB AAA AMS BRBPR CVVH CRRT ECMO IABP LVAD TAVR PCI
""")
# clinical words and device or test names matched in any case; several are also surnames (Foley)
CLINICAL_TERMS = _set("""
foley echo echocardiogram holter doppler swan ganz pleurx picc port-a-cath mediport bipap cpap
nicu picu micu sicu ccu cvicu lad lcx rca mca nihss rvr ciwa cows telemetry tele keppra lasix
""")
# letter-digit tokens with clinical meaning (lower case)
CLINICAL_CODES = _set("""
o2 co2 h2o pco2 po2 paco2 pao2 fio2 spo2 sao2 svo2 etco2 hco3 hba1c a1c b12 b6 b1 d5w d5ns d10 d50
t3 t4 ft4 dm1 dm2 t1dm t2dm covid-19 sars-cov-2 h1n1 cd4 cd8 il-6 vit-d 25-oh s1 s2 s3 s4 c1 c2 c3
c4 c5 c6 c7 m1 m2 m3 a1 a2 p1 p2 t1 t2 t5 t6 t7 t8 t9 t10 t11 t12 l1 l2 l3 l4 l5 s1 v1 v2 v3 v4 v5 v6 nph u100 k+ na+
ca2+ mg2+ 2/2 1/2 1/3 2/3 3/4 5/5 4/5 3/5 24h 48h 72h
""")
UNITS = _set("""
c f mg mcg ug g kg lb lbs ml l dl ul mmol mol meq u iu units unit mmhg cmh2o bpm hr hrs h min
mins sec day days wk wks week weeks mo month months yr yrs year years cm mm m ft in x q qd qh qhs
tab tabs cap caps puff puffs drop drops mg/dl mmol/l meq/l mg/kg mcg/kg/min ng/ml pg/ml iu/l
u/l k/ul g/dl
""")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NEVER_SAFE = frozenset(MONTHS + WEEKDAYS + tuple(m[:3] for m in MONTHS) + ("sept",))

_WORD = re.compile(r"[a-z][a-z'+-]*")


def words(text: str) -> set[str]:
    """Lower-cased words of ``text`` (letters, with inner apostrophes, hyphens, plus signs), and
    the parts of hyphenated words ("solu-medrol", "solu", "medrol")."""
    found = {w.strip("'-") for w in _WORD.findall(text.lower())}
    return (found | {p for w in found for p in w.split("-")}) - {""}


def phrase_words() -> set[str]:
    """Every word of the wording ``dpcare.text.corpus.phrases`` holds (headers, labs, vitals, drugs...)."""
    texts: list[str] = [*P.TITLES, *P.CONDITION, *P.BRANDS, *P.BRANDS.values()]
    texts += [h for hs in P.HEADERS.values() for h in hs]
    texts += [n for table in (P.LABS, P.VITALS) for names, _ in table.values() for n in names]
    texts += [t for table in (P.ADMISSION, P.DISPOSITIONS, P.PROBLEM_SHORT, P.DRUG_DISPLAY)
              for k, forms in table.items() for t in (k, *forms)]
    return set().union(*map(words, texts))


@cache
def drug_words() -> frozenset[str]:
    """Single-word drug names and brand names of the drug dictionary (empty if not installed)."""
    try:
        from drug_named_entity_recognition import drugs_finder
    except ImportError:
        return frozenset()
    return frozenset(w for v in drugs_finder.drug_variant_to_canonical if " " not in v
                     for w in words(v) if len(w) > 2)


@cache
def icd_words() -> frozenset[str]:
    """ICD-10-CM description words written in lower case or opening a description, lower-cased
    (empty if simple-icd-10-cm is not installed): an eponym or place capitalised inside a
    description ("Hodgkin" in "nodular sclerosis Hodgkin lymphoma") stays out."""
    try:
        import simple_icd_10_cm as cm
    except ImportError:
        return frozenset()
    found: set[str] = set()
    for code in cm.get_all_codes(True):
        ws = re.findall(r"[A-Za-z][a-z'-]+", cm.get_description(code))
        found.update(w.lower() for i, w in enumerate(ws) if i == 0 or w.islower())
    return frozenset(found)


@cache
def name_words() -> frozenset[str]:
    """Common US first and last names (Faker's en_US lists, from census data), lower-cased:
    never safe, even where they are also clinical words ("Burns", "Chambers", "Stone")."""
    try:
        from faker.providers.person.en_US import Provider
    except ImportError:
        return frozenset()
    return frozenset(n.lower() for table in (Provider.first_names, Provider.last_names)
                     for n in table)


def stop_words() -> frozenset[str]:
    """spaCy's English stop-words."""
    try:
        from spacy.lang.en.stop_words import STOP_WORDS
    except ImportError:
        raise MissingDependencyError("the masker needs spaCy: pip install 'dpcare[text]'") from None

    return frozenset(STOP_WORDS)


@cache
def safe_vocabulary() -> frozenset[str]:
    """All lower-cased safe words (see the module docstring); built once per process."""
    found = phrase_words() | drug_words() | icd_words()
    curated = SECTION_WORDS | CLINICAL_WORDS | CLINICAL_CODES | UNITS | CLINICAL_TERMS
    return frozenset((found - name_words()) | curated | stop_words()) - NEVER_SAFE


__all__ = ["CLINICAL_ACRONYMS", "CLINICAL_CODES", "CLINICAL_TERMS", "CLINICAL_WORDS", "NEVER_SAFE", "SECTION_WORDS",
           "safe_vocabulary", "stop_words", "words"]
