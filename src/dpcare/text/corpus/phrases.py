"""Wording for the generated notes: section headers, paraphrases, lab, vital and drug names."""

from __future__ import annotations

from functools import cache

from dpcare.exceptions import MissingDependencyError

HEADERS = {
    "hpi": ("HISTORY OF PRESENT ILLNESS:", "History of Present Illness:", "HPI:", "History:",
            "Reason for admission / HPI:"),
    "course": ("HOSPITAL COURSE:", "Hospital Course:", "Brief Hospital Course:",
               "Course in hospital:", "HOSPITAL COURSE BY PROBLEM:"),
    "labs": ("PERTINENT RESULTS:", "Labs:", "Laboratory Data:", "Pertinent Labs:",
             "Results on admission:"),
    "meds": ("MEDICATIONS:", "Medications given:", "Meds:", "Medications During Admission:",
             "Treatments:"),
    "dx": ("DISCHARGE DIAGNOSES:", "Discharge Diagnosis:", "Final Diagnoses:", "Dx:",
           "Diagnoses at discharge:"),
    "dispo": ("DISPOSITION:", "Discharge Disposition:", "Dispo:", "Discharged to:"),
}
TITLES = ("DISCHARGE SUMMARY", "Discharge Summary", "DISCHARGE NOTE", "Hospital Discharge Summary",
          "Physician Discharge Summary")
SECTION_ORDERS = (
    ("hpi", "course", "labs", "meds", "dx", "dispo"),
    ("hpi", "labs", "course", "meds", "dx", "dispo"),
    ("dx", "hpi", "course", "labs", "meds", "dispo"),
    ("hpi", "course", "dx", "meds", "labs", "dispo"),
    ("hpi", "labs", "meds", "course", "dx", "dispo"),
)
ADMISSION = {
    "ed": ("through the emergency department", "via the ED", "from the emergency department",
           "after presenting to the ED"),
    "elective": ("electively", "for a scheduled admission", "as an elective admission"),
    "direct": ("as a direct admission", "directly from clinic", "as a direct admit"),
    "transfer": ("in transfer",),
}
DISPOSITIONS = {
    "home": ("Home", "home", "discharged home"), "snf": ("Skilled nursing facility", "SNF",
                                                         "discharged to a skilled nursing facility"),
    "expired": ("Expired", "expired", "died in hospital"),
    "rehab": ("Acute rehabilitation facility", "rehab", "discharged to acute rehabilitation"),
    "ltach": ("Long-term acute care hospital", "LTACH", "discharged to long-term acute care"),
    "hospice": ("Hospice", "hospice", "discharged to hospice"),
    "ama": ("Left against medical advice", "AMA", "left against medical advice"),
    "psych": ("Psychiatric hospital", "inpatient psychiatry", "transferred to psychiatry"),
    "acute": ("Another acute care hospital", "outside hospital", "transferred to another hospital"),
}
CONDITION = ("stable", "good", "fair", "hemodynamically stable", "improved")
SEX_WORDS = {"female": ("woman", "female", "lady", "F"), "male": ("man", "male", "gentleman", "M"),
             None: ("patient", "patient", "individual", "")}
TITLE_OF = {"female": "Ms.", "male": "Mr.", None: "Patient"}

# lab key -> (paraphrases, decimals)
LABS: dict[str, tuple[tuple[str, ...], int]] = {
    "sodium": (("sodium", "Na", "Na+"), 0), "potassium": (("potassium", "K", "K+"), 1),
    "chloride": (("chloride", "Cl"), 0), "bicarbonate": (("bicarbonate", "HCO3", "bicarb"), 0),
    "bun": (("BUN", "urea nitrogen"), 0), "creatinine": (("creatinine", "Cr", "creat"), 1),
    "glucose_serum": (("glucose", "Glu", "serum glucose"), 0),
    "wbc": (("WBC", "white count", "white blood cell count"), 1),
    "hemoglobin": (("hemoglobin", "Hgb", "Hb"), 1), "hematocrit": (("hematocrit", "Hct"), 1),
    "platelet_count": (("platelets", "Plt", "platelet count"), 0),
    "magnesium": (("magnesium", "Mg"), 1), "phosphate": (("phosphate", "Phos"), 1),
    "calcium_total": (("calcium", "Ca"), 1), "calcium_ionized": (("ionized calcium", "iCa"), 2),
    "inr": (("INR",), 1), "pt": (("PT", "prothrombin time"), 1), "ptt": (("PTT",), 1),
    "ph_arterial": (("pH", "arterial pH"), 2), "ph_venous": (("venous pH", "VBG pH"), 2),
    "pco2_arterial": (("pCO2", "PaCO2"), 0), "po2_arterial": (("pO2", "PaO2"), 0),
    "pco2_venous": (("venous pCO2",), 0),
    "bilirubin_total": (("total bilirubin", "T bili", "bilirubin"), 1),
    "ast": (("AST", "SGOT"), 0), "alt": (("ALT", "SGPT"), 0),
    "alkaline_phosphatase": (("alkaline phosphatase", "alk phos"), 0),
    "lactate": (("lactate", "lactic acid"), 1), "albumin": (("albumin", "Alb"), 1),
    "troponin_t": (("troponin T", "TnT"), 0), "ldh": (("LDH",), 0), "crp": (("CRP",), 1),
    "ferritin": (("ferritin",), 0), "pf_ratio": (("P/F ratio", "PaO2/FiO2 ratio"), 0),
    "so2_arterial": (("SaO2",), 0), "total_protein": (("total protein",), 1),
}
VITALS: dict[str, tuple[tuple[str, ...], int]] = {
    "heart_rate": (("HR", "heart rate", "pulse"), 0), "respiratory_rate": (("RR", "resp rate"), 0),
    "spo2": (("SpO2", "O2 sat", "oxygen saturation"), 0), "temp_c": (("T", "temp", "temperature"), 1),
    "map": (("MAP", "mean arterial pressure"), 0),
    "weight_kg": (("weight", "wt"), 1),
}
VITAL_UNITS = {"spo2": "%", "temp_c": " C", "weight_kg": " kg", "map": " mmHg"}

# CLIF medication categories the drug dictionary does not name as such
DRUG_DISPLAY = {
    "albumin infusion": ("albumin",), "aminocaproic": ("aminocaproic acid",),
    "dextrose": ("dextrose",), "dextrose in water d5w": ("D5W", "dextrose 5% in water"),
    "magnesium": ("magnesium sulfate", "IV magnesium"), "tpn": ("TPN", "parenteral nutrition"),
    "sodium chloride": ("normal saline", "NS", "sodium chloride 0.9%"),
    "piperacillin tazobactam": ("piperacillin-tazobactam", "pip-tazo", "Zosyn"),
    "ampicillin sulbactam": ("ampicillin-sulbactam", "Unasyn"),
    "mechanical ventilation": ("mechanical ventilation", "intubation"),
    "anticoagulants": ("anticoagulation", "anticoagulants"),
    "antiplatelet agents": ("antiplatelet therapy",), "systemic steroids": ("steroids",),
    "oral hypoglycemic drugs": ("oral hypoglycemics",), "opiate analgesics": ("opioids",),
}
GROUP_PHRASES = {
    "antibiotics": ("{pt} was treated with {tx} for antimicrobial coverage.",
                    "Antibiotics: {tx}.", "Empiric antibiotics ({tx}) were given."),
    "vasoactives": ("Vasopressor support with {tx} was required.",
                    "{pt} required {tx} for blood pressure support.", "Pressors: {tx}."),
    "sedation": ("Sedation was maintained with {tx}.", "{pt} was sedated with {tx}."),
    "analgesia": ("Pain was controlled with {tx}.", "Analgesia: {tx}."),
    "home": ("Home regimen including {tx} was continued.", "{pt} remained on home {tx}."),
    "typical": ("{pt} was treated with {tx}.", "Treatment included {tx}.",
                "{tx} given during the admission."),
    "other": ("{pt} also received {tx}.", "Other treatments: {tx}.", "{tx} was given."),
}
# ICD-10-CM code -> short forms clinicians write (problem paraphrases)
PROBLEM_SHORT = {
    "I10": ("HTN", "hypertension"), "E119": ("DM2", "type 2 diabetes"),
    "E785": ("HLD", "hyperlipidemia"), "E784": ("HLD", "hyperlipidemia"),
    "I4891": ("afib", "atrial fibrillation"), "N179": ("AKI", "acute kidney injury"),
    "K219": ("GERD", "reflux"), "J449": ("COPD",), "J441": ("COPD exacerbation",),
    "I509": ("CHF", "heart failure"), "I2510": ("CAD", "coronary artery disease"),
    "N390": ("UTI", "urinary tract infection"), "F329": ("depression",),
    "E039": ("hypothyroidism",), "D649": ("anemia",), "E871": ("hyponatremia",),
    "A419": ("sepsis",), "J189": ("pneumonia",), "F419": ("anxiety",), "E876": ("hypokalemia",),
    "N189": ("CKD", "chronic kidney disease"), "J9600": ("acute respiratory failure", "ARF"),
    "K7460": ("cirrhosis",), "R4020": ("coma",), "G4733": ("OSA", "sleep apnea"),
    "I252": ("prior MI", "old MI"), "F0390": ("dementia",), "Z66": ("DNR status",),
}


def _trim(description: str) -> str:
    for tail in (", unspecified", " unspecified", ", initial encounter", ", not elsewhere classified"):
        description = description.removesuffix(tail)
    return description


def problem_forms(code: str, description: str) -> tuple[str, ...]:
    """Ways to write a diagnosis: its ICD-10-CM description, trimmed, lower-cased, short forms."""
    trimmed = _trim(description)
    lower = trimmed[:1].lower() + trimmed[1:] if not trimmed[:2].isupper() else trimmed
    return tuple(dict.fromkeys((description, trimmed, lower) + PROBLEM_SHORT.get(code, ())))


# generic -> a brand name; kept only where the drug dictionary maps both to the same drug
BRANDS = {
    "furosemide": "Lasix", "vancomycin": "Vancocin", "norepinephrine": "Levophed",
    "ceftriaxone": "Rocephin", "methylprednisolone": "Solu-Medrol", "albuterol": "Ventolin",
    "metoprolol": "Lopressor", "pantoprazole": "Protonix", "acetaminophen": "Tylenol",
    "ondansetron": "Zofran", "levetiracetam": "Keppra", "naloxone": "Narcan", "propofol": "Diprivan",
    "dexmedetomidine": "Precedex", "lorazepam": "Ativan", "midazolam": "Versed",
    "hydromorphone": "Dilaudid", "amiodarone": "Cordarone", "enoxaparin": "Lovenox",
    "rifaximin": "Xifaxan", "spironolactone": "Aldactone", "lisinopril": "Zestril",
    "carvedilol": "Coreg", "azithromycin": "Zithromax", "dexamethasone": "Decadron",
    "donepezil": "Aricept", "ipratropium": "Atrovent", "diltiazem": "Cardizem", "meropenem": "Merrem",
    "cefepime": "Maxipime", "metronidazole": "Flagyl", "phenylephrine": "Neo-Synephrine",
    "octreotide": "Sandostatin", "nicardipine": "Cardene", "fentanyl": "Sublimaze",
    "ciprofloxacin": "Cipro", "levofloxacin": "Levaquin", "fluconazole": "Diflucan",
    "acyclovir": "Zovirax", "labetalol": "Trandate", "bumetanide": "Bumex", "dobutamine": "Dobutrex",
    "milrinone": "Primacor", "cefazolin": "Ancef", "diazepam": "Valium", "prednisone": "Deltasone",
    "alteplase": "Activase", "rocuronium": "Zemuron", "voriconazole": "Vfend",
    "doxycycline": "Vibramycin", "clindamycin": "Cleocin", "aztreonam": "Azactam",
    "ceftazidime": "Fortaz", "dopamine": "Intropin",
}


@cache
def canonical_drug(name: str) -> str | None:
    """The drug dictionary's canonical name for ``name`` (generic or brand), None if unknown."""
    try:
        from drug_named_entity_recognition import find_drugs
    except ImportError:
        raise MissingDependencyError("generated notes need the drug dictionary: pip install --no-deps "
                                     "drug-named-entity-recognition==2.0.9") from None
    matches = find_drugs(name.replace("-", " ").split(), is_ignore_case=True)
    return matches[0][0].get("name") if matches else None


@cache
def drug_forms(name: str) -> tuple[str, ...]:
    """Ways to write a treatment: its name (DRUG_DISPLAY for names the drug dictionary lacks)
    and its brand name when the drug dictionary confirms that it names the same drug."""
    if name in DRUG_DISPLAY:
        return DRUG_DISPLAY[name]
    brand = BRANDS.get(name)
    if brand and canonical_drug(name) is not None and canonical_drug(brand) == canonical_drug(name):
        return (name, brand)
    return (name,)

# --- templates: {slot}s are filled by corpus._Renderer ------------------------------------------
HEADER_TEMPLATES = (
    ("{title}\n\nPatient: {name}    MRN: {mrn}\nAdmission Date: {admit}    Discharge Date: {disch}\n"
     "Date of Birth: {dob}    Sex: {sex}\nAttending: {doctor}, MD\n"),
    ("{hosp}\n{title}\nName: {name}   Unit No: {mrn}   Acct: {acct}\nAdmit: {admit}   Discharge: "
     "{disch}\nAddress: {street}, {city}, {state} {zip}   Phone: {phone}\n"),
    ("Admission Date: {admit}   Discharge Date: {disch}\n\nDate of Birth: {dob}   Sex: {sex}\n\n"
     "Service: {service}\n"),
    ("{title} - {hosp}\nPt: {name} (MRN {mrn}), DOB {dob}\nAdmitted {admit}, discharged {disch}. "
     "Attending physician: Dr. {doctor}.\n"),
    "{title}\nMRN: {mrn}  Encounter: {acct}\nPatient name: {name}\nDates of service: {admit} to {disch}\n",
)
HPI_TEMPLATES = (
    "{name} is {a} {age}-year-old {sex}{pmh_clause} who presented {via} with {cc}.",
    "{age} yo {sexl}{pmh_clause}, admitted {via} on {date} for {cc}.",
    "This is {a} {age} year old {sex}{pmh_clause} who was admitted on {date} with {cc}.",
    "{title} {last} is {a} {age}-year-old {sex} who came to {hosp} {via} with {cc}.{pmh_sentence}",
    ("The patient, {a} {age}-year-old {race}{sex}, was admitted {via} on {date} for {cc}."
     "{pmh_sentence}"),
    "Pt is {a} {age} y/o {sex}{pmh_clause} presenting with {cc}.",
)
PMH_INTROS = ("with a history of", "with PMH of", "with a past medical history significant for",
              "known for")
VITALS_INTROS = ("In the ED, vitals were ", "Initial vitals: ", "On arrival: ",
                 "Vital signs on admission: ")
COURSE_OPENINGS = (
    "{Pt} was admitted to the medicine service for management of {cc}.",
    "{Pt} was admitted with {cc}.", "Admitted for {cc}.",
    "On admission, the working diagnosis was {cc}.", "The primary issue this admission was {cc}.",
)
COURSE_PROBLEM = ("{Pt} was also found to have {p}.", "Course was complicated by {p}.",
                  "{p} was noted and managed.", "{p} was monitored and remained stable.",
                  "Workup was notable for {p}.")
COURSE_BY_PROBLEM_TX = ("treated with {tx}.", "started on {tx}.", "managed with {tx}.")
COURSE_BY_PROBLEM = ("monitored, stable.", "managed supportively.", "improved.", "resolved.",
                     "continue outpatient management.")
LAB_TRENDS = ("{t} went from {a} on admission to {z} at discharge.", "{t} trended from {a} to {z}.",
              "Serial {t}: {a} -> {z}.")
DEATH = ("Despite maximal therapy, {pt} expired on {d}.",
         ("After discussion with the family, care was transitioned to comfort measures and {pt} "
          "passed away on {d}."))
FOLLOW_UP = (
    "Follow up with Dr. {pcp} at {hosp} in 1-2 weeks; call {phone} to schedule.",
    "F/U: PCP Dr. {pcp} ({phone}) within 7 days.",
    "Please follow up with your primary care physician, Dr. {pcp}. Clinic phone: {phone}.",
    "Follow-up appointment with {pcp}, MD, {hosp}. Phone {phone}.",
)
SIGNATURES = ("{doc}, MD", "Electronically signed by {doc}, MD on {d}",
              "Dictated by: {doc}, MD\nJob #: {job}", "Attending: {doc} MD, {d}")
