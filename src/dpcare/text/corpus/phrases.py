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

# --- the varied style (styles.py); the default templates above never read these tables --------------------------
# Only standard, widely used clinical abbreviations. No form contains a comma, semicolon or newline, so a list
# separator can never fall inside a span.

# ICD-10-CM code -> abbreviations / short forms clinicians write for it
PROBLEM_ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "I10": ("HTN",), "I2510": ("CAD",), "I509": ("CHF", "HF"), "I5022": ("HFrEF", "systolic CHF"),
    "I5023": ("HFrEF exacerbation", "acute on chronic systolic CHF"), "I5032": ("HFpEF", "diastolic CHF"),
    "I5033": ("acute on chronic diastolic CHF",), "I110": ("hypertensive heart disease",),
    "I4891": ("afib", "AF", "AFib", "a-fib"), "I480": ("pAF", "paroxysmal afib"), "I252": ("MI", "prior MI"),
    "I214": ("NSTEMI",), "I340": ("MR", "mitral regurgitation"), "I495": ("SSS",), "I272": ("pulm HTN",),
    "I959": ("hypotension",), "I951": ("orthostatic hypotension",), "I519": ("heart disease",),
    "E119": ("DM2", "T2DM", "DM"), "E1122": ("DM2 w/ CKD",), "E1165": ("DM2 w/ hyperglycemia",),
    "E1142": ("diabetic neuropathy",), "E11621": ("diabetic foot ulcer",), "E785": ("HLD",), "E784": ("HLD",),
    "E780": ("hypercholesterolemia",), "E039": ("hypothyroidism",), "E871": ("hyponatremia",),
    "E875": ("hyperkalemia",), "E876": ("hypokalemia",), "E872": ("acidosis",), "E669": ("obesity",),
    "E43": ("severe malnutrition",), "J449": ("COPD",), "J441": ("COPD exacerbation", "AECOPD"),
    "J45909": ("asthma",), "J9600": ("acute resp failure", "respiratory failure"), "J9601": ("AHRF",),
    "J189": ("PNA", "pneumonia"), "J690": ("aspiration PNA",), "J95851": ("VAP",), "J90": ("pleural effusion",),
    "G4733": ("OSA",), "A419": ("sepsis",), "R6520": ("severe sepsis",), "R6521": ("septic shock",),
    "R6511": ("SIRS",), "R570": ("cardiogenic shock",), "N179": ("AKI",), "N170": ("ATN",), "N189": ("CKD",),
    "N183": ("CKD 3", "CKD stage 3"), "N184": ("CKD 4",), "N186": ("ESRD",), "N390": ("UTI",),
    "K219": ("GERD",), "K922": ("GI bleed", "GIB"), "K7460": ("cirrhosis",), "K7030": ("EtOH cirrhosis",),
    "K7031": ("EtOH cirrhosis w/ ascites",), "K769": ("liver disease",), "K766": ("portal HTN",),
    "K767": ("HRS",), "K7581": ("NASH",), "K7290": ("liver failure",), "I8510": ("esophageal varices",),
    "B1920": ("HCV", "hep C"), "D62": ("ABLA",), "D649": ("anemia",), "D509": ("IDA",),
    "D696": ("thrombocytopenia",), "D689": ("coagulopathy",), "C801": ("malignancy", "cancer"),
    "C799": ("metastatic cancer", "mets"), "C3490": ("lung cancer", "lung CA"), "C189": ("colon cancer", "colon CA"),
    "C9110": ("CLL",), "F0390": ("dementia",), "F329": ("MDD", "depression"), "F419": ("anxiety",),
    "F1010": ("EtOH abuse",), "F1020": ("EtOH dependence",), "F17210": ("tobacco use",), "F05": ("delirium",),
    "G40909": ("seizure disorder", "epilepsy"), "R4020": ("coma",), "M109": ("gout",), "R0902": ("hypoxemia",),
}
# drug name (as the records write it) -> abbreviations / short names clinicians write
TREATMENT_ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "aspirin": ("ASA",), "nitroglycerin": ("NTG", "nitro"), "acetaminophen": ("APAP",),
    "vancomycin": ("vanc", "vanco"), "norepinephrine": ("norepi", "levophed"), "vasopressin": ("vaso",),
    "piperacillin tazobactam": ("pip-tazo", "zosyn"), "sodium bicarbonate": ("bicarb",),
    "sodium chloride": ("NS",), "mechanical ventilation": ("intubation", "mech vent"),
    "alteplase": ("tPA",), "anticoagulants": ("anticoagulation", "AC"),
    "systemic steroids": ("steroids",), "opiate analgesics": ("opioids",), "tpn": ("TPN",),
    "dextrose in water d5w": ("D5W",), "furosemide": ("lasix",), "metronidazole": ("flagyl",),
    "pantoprazole": ("PPI",), "esomeprazole": ("PPI",),
    "methylprednisolone": ("solumedrol",),
}
# generic treatments a note may name besides the record's drugs, full form first
GENERIC_TREATMENTS: dict[str, tuple[str, ...]] = {
    "antibiotics": ("antibiotics", "abx"), "intravenous fluids": ("IV fluids", "IVF"),
    "oxygen": ("supplemental oxygen", "O2"), "transfusion": ("pRBC transfusion", "PRBCs"),
    "noninvasive ventilation": ("BiPAP",), "dialysis": ("hemodialysis", "HD"), "diuresis": ("diuresis",),
    "nebulizers": ("nebulizer treatments", "nebs"), "chemotherapy": ("chemotherapy", "chemo"),
    "paracentesis": ("therapeutic paracentesis", "large volume paracentesis"),
    "fluid restriction": ("fluid restriction",),
}
# ICD-10-CM status codes (not problems) -> a past treatment, written after "s/p" or "on"
STATUS_TREATMENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Z955": ("s/p", ("PCI", "coronary stent placement")), "Z951": ("s/p", ("CABG",)),
    "Z950": ("s/p", ("pacemaker placement", "PPM")), "Z9884": ("s/p", ("gastric bypass",)),
    "Z89421": ("s/p", ("right toe amputation",)), "Z992": ("on", ("HD", "hemodialysis")),
    "Z794": ("on", ("insulin",)), "Z7901": ("on", ("anticoagulation",)), "Z7982": ("on", ("ASA", "aspirin")),
}
# tests a work-up names (not in the records: the varied style draws them for the note's problems), full form first
WORKUP_TESTS: dict[str, tuple[str, ...]] = {
    "cxr": ("chest x-ray", "CXR", "chest radiograph"), "cbc": ("complete blood count", "CBC"),
    "bmp": ("basic metabolic panel", "BMP", "chem 7"), "cmp": ("comprehensive metabolic panel", "CMP"),
    "ekg": ("electrocardiogram", "EKG", "ECG"), "echo": ("echocardiogram", "TTE", "echo"),
    "abg": ("arterial blood gas", "ABG"), "ua": ("urinalysis", "UA"), "ucx": ("urine culture", "UCx"),
    "bcx": ("blood cultures", "BCx"), "lfts": ("liver function tests", "LFTs"),
    "trop": ("troponin", "trop", "troponins"), "bnp": ("BNP", "brain natriuretic peptide"),
    "ct_head": ("CT head", "head CT"), "cta_chest": ("CT angiogram of the chest", "CTA chest"),
    "ruq_us": ("right upper quadrant ultrasound", "RUQ US"), "a1c": ("hemoglobin A1c", "A1c", "HbA1c"),
    "tsh": ("TSH",), "coags": ("coagulation studies", "coags"), "lactate": ("lactate", "lactic acid"),
    "eeg": ("EEG", "electroencephalogram"), "egd": ("EGD", "upper endoscopy"),
    "ct_abd": ("CT abdomen/pelvis", "CT A/P"),
    "sputum": ("sputum culture", "sputum cx"), "renal_us": ("renal ultrasound", "renal US"),
    "mri_brain": ("MRI brain",), "ct_chest": ("CT chest",), "le_us": ("lower extremity duplex", "LE dopplers"),
    "para": ("diagnostic paracentesis", "diagnostic para"), "ammonia": ("ammonia level", "NH3"),
    "etoh": ("serum alcohol level", "EtOH level"), "kub": ("abdominal x-ray", "KUB"),
}
# symptom -> ways to write it (problems in i2b2 2010, also when negated)
SYMPTOMS: dict[str, tuple[str, ...]] = {
    "sob": ("shortness of breath", "SOB", "dyspnea"), "doe": ("dyspnea on exertion", "DOE"),
    "cp": ("chest pain", "CP"), "nausea": ("nausea", "N/V"), "vomiting": ("vomiting", "emesis"),
    "abd_pain": ("abdominal pain", "abd pain"), "headache": ("headache", "HA"),
    "edema": ("lower extremity edema", "LE edema", "leg swelling"),
    "ams": ("altered mental status", "AMS", "confusion"),
    "fever": ("fever", "fevers"), "chills": ("chills",), "cough": ("cough", "productive cough"),
    "brbpr": ("BRBPR", "rectal bleeding"), "melena": ("melena", "black stools"), "hematemesis": ("hematemesis",),
    "dysuria": ("dysuria",), "jaundice": ("jaundice",), "wheezing": ("wheezing",), "orthopnea": ("orthopnea",),
    "pnd": ("PND", "paroxysmal nocturnal dyspnea"), "palpitations": ("palpitations",), "syncope": ("syncope",),
    "weakness": ("weakness", "generalized weakness"), "fatigue": ("fatigue",),
    "weight_loss": ("weight loss", "wt loss"),
    "hemoptysis": ("hemoptysis",), "diarrhea": ("diarrhea",), "distension": ("abdominal distension", "abd distension"),
    "low_uop": ("decreased urine output", "decreased UOP"), "hypoxia": ("hypoxia", "hypoxemia"),
    "lethargy": ("lethargy",), "diaphoresis": ("diaphoresis",), "hypotension": ("hypotension",),
}
# problems a work-up rules in or out -> ways to write them
DIFFERENTIALS: dict[str, tuple[str, ...]] = {
    "pe": ("PE", "pulmonary embolism"), "acs": ("ACS", "acute coronary syndrome"), "mi": ("MI", "NSTEMI"),
    "pna": ("PNA", "pneumonia"), "chf": ("CHF exacerbation", "CHF"), "sepsis": ("sepsis",), "uti": ("UTI",),
    "cva": ("CVA", "stroke"), "dvt": ("DVT",), "aspiration": ("aspiration PNA", "aspiration"),
    "gib": ("GI bleed", "GIB", "UGIB"), "sbp": ("SBP", "spontaneous bacterial peritonitis"),
    "encephalopathy": ("hepatic encephalopathy",), "seizure": ("seizure", "seizures"),
    "ich": ("ICH", "intracranial hemorrhage"),
    "copd_exac": ("COPD exacerbation",), "withdrawal": ("EtOH withdrawal",), "pyelo": ("pyelonephritis",),
    "bacteremia": ("bacteremia",), "obstruction": ("SBO", "bowel obstruction"), "ptx": ("PTX", "pneumothorax"),
}
# findings a test shows (problems) -> ways to write them
FINDINGS: dict[str, tuple[str, ...]] = {
    "edema": ("pulmonary edema", "pulm edema"), "effusion": ("pleural effusion", "effusions"),
    "infiltrate": ("infiltrate", "RLL infiltrate", "LLL consolidation"), "cardiomegaly": ("cardiomegaly",),
    "low_ef": ("reduced EF", "LV dysfunction"), "leukocytosis": ("leukocytosis",), "anemia": ("anemia",),
    "aki": ("AKI", "elevated Cr"), "hyponatremia": ("hyponatremia",), "st": ("ST depressions", "TWI"),
    "rvr": ("afib w/ RVR", "RVR"), "pyuria": ("pyuria",), "ascites": ("ascites",), "gnr": ("GNR bacteremia",),
    "transaminitis": ("transaminitis", "elevated LFTs"), "hypercarbia": ("hypercarbia",),
    "varices": ("varices", "esophageal varices"), "mass": ("mass", "RUL mass", "lung mass"),
    "bradycardia": ("bradycardia",), "hyperkalemia": ("hyperkalemia",), "hypotension": ("hypotension",),
}
# differential / finding -> (tests that look for it, treatments it gets)
DIFFERENTIAL_WORKUP: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pe": (("cta_chest", "le_us"), ("heparin",)), "acs": (("ekg", "trop"), ("aspirin", "heparin", "nitroglycerin")),
    "mi": (("trop", "ekg"), ("aspirin", "heparin")), "pna": (("cxr", "sputum"), ("antibiotics", "ceftriaxone")),
    "chf": (("bnp", "cxr", "echo"), ("furosemide", "diuresis")), "sepsis": (("bcx", "lactate"), ("antibiotics",)),
    "uti": (("ua", "ucx"), ("antibiotics", "ceftriaxone")), "cva": (("ct_head", "mri_brain"), ("aspirin",)),
    "dvt": (("le_us",), ("heparin", "enoxaparin")), "aspiration": (("cxr",), ("antibiotics",)),
    "gib": (("cbc", "egd"), ("pantoprazole", "transfusion")), "sbp": (("para",), ("antibiotics", "ceftriaxone")),
    "encephalopathy": (("ammonia",), ("lactulose", "rifaximin")), "seizure": (("eeg",), ("levetiracetam",)),
    "ich": (("ct_head",), ()), "copd_exac": (("abg", "cxr"), ("prednisone", "nebulizers")),
    "withdrawal": (("etoh",), ("lorazepam",)), "pyelo": (("ua", "ucx", "ct_abd"), ("antibiotics", "ceftriaxone")),
    "bacteremia": (("bcx",), ("antibiotics", "vancomycin")),
    "obstruction": (("ct_abd", "kub"), ("intravenous fluids",)),
    "ptx": (("cxr", "ct_chest"), ()),
}
FINDING_WORKUP: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "edema": (("cxr",), ("furosemide", "diuresis")), "effusion": (("cxr", "ct_chest"), ("furosemide",)),
    "infiltrate": (("cxr", "ct_chest"), ("antibiotics", "ceftriaxone")), "cardiomegaly": (("cxr",), ()),
    "low_ef": (("echo",), ("carvedilol", "lisinopril", "metoprolol")), "leukocytosis": (("cbc",), ()),
    "anemia": (("cbc",), ("transfusion",)), "aki": (("bmp",), ("intravenous fluids",)),
    "hyponatremia": (("bmp",), ("fluid restriction",)), "st": (("ekg",), ("aspirin", "heparin")),
    "rvr": (("ekg",), ("diltiazem", "metoprolol")), "pyuria": (("ua",), ("antibiotics",)),
    "ascites": (("ruq_us", "ct_abd"), ("paracentesis", "spironolactone")),
    "gnr": (("bcx",), ("antibiotics", "cefepime")),
    "transaminitis": (("lfts",), ()), "hypercarbia": (("abg",), ("noninvasive ventilation",)),
    "varices": (("egd",), ("octreotide",)), "mass": (("ct_chest", "ct_abd", "cxr"), ()), "bradycardia": (("ekg",), ()),
    "hyperkalemia": (("bmp",), ("calcium gluconate", "insulin")), "hypotension": ((), ("intravenous fluids",)),
}
# drug -> findings it is held for
HOLDS = {"lisinopril": ("aki", "hyperkalemia", "hypotension"), "metoprolol": ("bradycardia", "hypotension"),
         "carvedilol": ("bradycardia", "hypotension"), "furosemide": ("aki", "hypotension"),
         "spironolactone": ("aki", "hyperkalemia"), "diltiazem": ("bradycardia", "hypotension")}
# organ systems whose problems get a work-up in the note; the others get plans about their treatment only
ACUTE_SYSTEMS = ("heart", "coronary", "rhythm", "airway", "lung", "infection", "liver", "gi", "kidney", "neuro")
# organ system of a problem (ICD-10-CM prefix, longest wins) -> its presenting symptoms, work-up tests,
# findings and differentials
SYSTEM_OF_PREFIX = {
    "I50": "heart", "I11": "heart", "I13": "heart", "I2": "coronary", "I26": "lung", "I27": "lung",
    "I28": "lung", "I48": "rhythm", "I49": "rhythm",
    "I5": "heart", "I3": "heart", "I9": "heart", "J4": "airway", "J9": "lung", "J1": "lung", "J6": "lung",
    "R09": "lung", "A4": "infection", "R65": "infection", "R57": "infection", "N39": "infection",
    "K7": "liver", "B19": "liver", "K92": "gi", "I85": "gi", "D62": "gi",
    "N1": "kidney", "E87": "kidney", "R40": "neuro", "F0": "neuro", "G": "neuro", "G47": "general", "I6": "neuro",
    "C34": "lung", "C": "cancer", "E1": "metabolic", "E": "metabolic", "D": "blood",
}
SYSTEMS: dict[str, dict[str, tuple[str, ...]]] = {
    "heart": {
        "symptoms": ("sob", "doe", "orthopnea", "edema", "pnd"),
        "tests": ("bnp", "cxr", "echo", "ekg", "trop"),
        "findings": ("edema", "effusion", "cardiomegaly", "low_ef"),
        "differentials": ("acs", "pna", "pe"),
    },
    "coronary": {
        "symptoms": ("cp", "sob", "diaphoresis"),
        "tests": ("ekg", "trop", "echo", "cxr"),
        "findings": ("st", "low_ef"),
        "differentials": ("acs", "mi", "pe"),
    },
    "rhythm": {
        "symptoms": ("palpitations", "sob", "syncope"),
        "tests": ("ekg", "echo", "tsh", "bmp"),
        "findings": ("rvr",),
        "differentials": ("acs", "pe"),
    },
    "airway": {
        "symptoms": ("sob", "wheezing", "cough"),
        "tests": ("cxr", "abg", "cbc", "sputum"),
        "findings": ("hypercarbia", "infiltrate"),
        "differentials": ("pna", "pe", "chf"),
    },
    "lung": {
        "symptoms": ("sob", "cough", "hypoxia", "fever", "hemoptysis"),
        "tests": ("cxr", "abg", "cta_chest", "bcx"),
        "findings": ("infiltrate", "effusion", "mass", "hypercarbia"),
        "differentials": ("pna", "pe", "chf", "ptx"),
    },
    "infection": {
        "symptoms": ("fever", "chills", "hypotension", "ams", "dysuria"),
        "tests": ("bcx", "ucx", "ua", "lactate", "cxr", "cbc"),
        "findings": ("leukocytosis", "pyuria", "gnr", "infiltrate"),
        "differentials": ("pna", "uti", "bacteremia", "pyelo"),
    },
    "liver": {
        "symptoms": ("distension", "jaundice", "ams", "abd_pain"),
        "tests": ("lfts", "ruq_us", "coags", "cbc"),
        "findings": ("ascites", "transaminitis", "varices"),
        "differentials": ("sbp", "encephalopathy", "gib"),
    },
    "gi": {
        "symptoms": ("melena", "hematemesis", "brbpr", "weakness"),
        "tests": ("cbc", "egd", "coags", "bmp"),
        "findings": ("anemia", "varices"),
        "differentials": ("gib", "obstruction"),
    },
    "kidney": {
        "symptoms": ("low_uop", "fatigue", "nausea"),
        "tests": ("bmp", "ua", "renal_us"),
        "findings": ("aki", "hyponatremia"),
        "differentials": ("uti", "obstruction"),
    },
    "neuro": {
        "symptoms": ("ams", "lethargy", "weakness", "headache"),
        "tests": ("ct_head", "mri_brain", "eeg", "bmp"),
        "findings": ("hyponatremia",),
        "differentials": ("cva", "ich", "seizure", "withdrawal"),
    },
    "cancer": {
        "symptoms": ("weight_loss", "fatigue", "cough", "abd_pain"),
        "tests": ("ct_abd", "cbc", "cmp", "cxr"),
        "findings": ("mass", "anemia", "effusion"),
        "differentials": ("pe", "obstruction", "pna"),
    },
    "metabolic": {
        "symptoms": ("weakness", "fatigue", "nausea"),
        "tests": ("bmp", "a1c", "tsh", "cbc"),
        "findings": ("aki", "hyponatremia"),
        "differentials": ("uti", "sepsis"),
    },
    "blood": {
        "symptoms": ("fatigue", "weakness", "sob"),
        "tests": ("cbc", "coags", "bmp"),
        "findings": ("anemia",),
        "differentials": ("gib", "sepsis"),
    },
    "general": {
        "symptoms": ("weakness", "fatigue", "fever", "sob"),
        "tests": ("cbc", "bmp", "cxr", "ua"),
        "findings": ("leukocytosis", "aki"),
        "differentials": ("uti", "pna", "sepsis"),
    },
}
# symptoms a review of systems often denies
ROS_NEGATIVES = ("fever", "chills", "cp", "sob", "nausea", "vomiting", "abd_pain", "diarrhea", "dysuria",
                 "headache", "palpitations", "cough", "melena", "brbpr", "syncope", "edema")
# drug -> usual adult dose, route and frequency (only drugs the records use; no dose: route-free name)
DOSES: dict[str, tuple[str, ...]] = {
    "metoprolol": ("25 mg PO BID", "12.5 mg PO BID", "50 mg PO BID"), "lisinopril": ("10 mg PO daily", "5 mg daily"),
    "carvedilol": ("3.125 mg PO BID", "6.25 mg BID", "12.5 mg PO BID"),
    "furosemide": ("40 mg PO daily", "20 mg PO BID", "40 mg IV BID"), "spironolactone": ("25 mg PO daily",),
    "aspirin": ("81 mg PO daily", "81 mg daily"), "albuterol": ("2.5 mg neb q4h PRN", "2 puffs q4h PRN"),
    "ipratropium": ("0.5 mg neb q6h",), "prednisone": ("40 mg PO daily", "40 mg daily x 5 days"),
    "azithromycin": ("500 mg PO daily", "250 mg PO daily"), "ceftriaxone": ("1 g IV q24h", "2 g IV daily"),
    "vancomycin": ("1 g IV q12h", "1.25 g IV q12h"), "cefepime": ("2 g IV q8h", "2 g IV q12h"),
    "meropenem": ("1 g IV q8h",), "piperacillin tazobactam": ("4.5 g IV q6h", "3.375 g IV q6h"),
    "metronidazole": ("500 mg IV q8h", "500 mg PO TID"), "cefazolin": ("2 g IV q8h",),
    "levofloxacin": ("750 mg PO daily",), "ciprofloxacin": ("500 mg PO BID",), "clindamycin": ("600 mg IV q8h",),
    "methylprednisolone": ("125 mg IV x1", "60 mg IV q6h"), "dexamethasone": ("4 mg PO q6h", "10 mg IV x1"),
    "lactulose": ("30 mL PO TID", "20 g PO TID"), "rifaximin": ("550 mg PO BID",),
    "levetiracetam": ("500 mg PO BID", "1000 mg PO BID"), "lorazepam": ("1 mg IV PRN", "0.5 mg PO q6h PRN"),
    "naloxone": ("0.4 mg IV PRN",), "morphine": ("2 mg IV q4h PRN", "15 mg PO q4h PRN"),
    "ondansetron": ("4 mg IV q6h PRN", "4 mg PO q8h PRN"), "enoxaparin": ("40 mg SC daily",),
    "heparin": ("5000 units SC TID", "5000 units SC q8h"), "donepezil": ("10 mg PO qHS", "5 mg PO nightly"),
    "acetaminophen": ("650 mg PO q6h PRN", "1 g PO q8h PRN"), "pantoprazole": ("40 mg PO daily", "40 mg IV BID"),
    "amiodarone": ("200 mg PO daily",), "diltiazem": ("30 mg PO QID", "120 mg PO daily"),
    "hydromorphone": ("0.5 mg IV q3h PRN",), "labetalol": ("200 mg PO BID",), "bumetanide": ("1 mg IV BID",),
    "fluconazole": ("400 mg PO daily",), "insulin": ("per sliding scale", "SC per sliding scale"),
    "nitroglycerin": ("0.4 mg SL PRN",), "sodium bicarbonate": ("650 mg PO TID",),
    "atorvastatin": ("40 mg PO daily", "80 mg PO qHS"), "levothyroxine": ("50 mcg PO daily", "88 mcg PO daily"),
    "allopurinol": ("100 mg PO daily",), "sertraline": ("50 mg PO daily",), "omeprazole": ("20 mg PO daily",),
    "tamsulosin": ("0.4 mg PO qHS",), "thiamine": ("100 mg PO daily",),
}
# drugs given by continuous infusion (written with "gtt" / "drip", never on a discharge list)
INFUSIONS = ("norepinephrine", "vasopressin", "phenylephrine", "epinephrine", "dopamine", "dobutamine", "milrinone",
             "propofol", "fentanyl", "midazolam", "dexmedetomidine", "esmolol", "octreotide", "heparin",
             "nitroglycerin", "insulin")
# drug -> ICD-10-CM prefixes of problems it treats (an indication is written only for a problem of the record)
INDICATIONS: dict[str, tuple[str, ...]] = {
    "lisinopril": ("I10", "I50", "I11", "I13", "N18", "E11"), "metoprolol": ("I10", "I48", "I25", "I50", "I21"),
    "carvedilol": ("I50", "I10"), "furosemide": ("I50", "I11", "K70", "K74", "J81"), "spironolactone": ("K7", "I50"),
    "insulin": ("E11",), "albuterol": ("J44", "J45"), "ipratropium": ("J44",), "prednisone": ("J44", "J45"),
    "methylprednisolone": ("J44", "J45"), "lactulose": ("K7",), "rifaximin": ("K7",), "octreotide": ("K92", "I85"),
    "levetiracetam": ("G40",), "donepezil": ("F03",), "pantoprazole": ("K21", "K92"), "amiodarone": ("I48",),
    "diltiazem": ("I48",), "aspirin": ("I25", "I21"), "anticoagulants": ("I48", "Z86"),
    "atorvastatin": ("E78", "I25"), "levothyroxine": ("E03",), "allopurinol": ("M10",), "sertraline": ("F32", "F41"),
    "omeprazole": ("K21",), "tamsulosin": ("R33",), "thiamine": ("F10",),
    "vancomycin": ("A41", "J18", "J69", "J95", "N39"), "cefepime": ("A41", "J18", "J95", "N39"),
    "ceftriaxone": ("A41", "J18", "N39"), "meropenem": ("A41", "J18", "N39"), "azithromycin": ("J18", "J44"),
    "piperacillin tazobactam": ("A41", "J18", "J69", "J95"), "norepinephrine": ("A41", "R65", "R57", "I95"),
}
# symptom-relieving drugs -> the symptoms they are given for
SYMPTOM_INDICATIONS = {"ondansetron": ("nausea", "vomiting"), "morphine": ("cp", "abd_pain"),
                       "acetaminophen": ("fever", "headache"), "nitroglycerin": ("cp",), "hydromorphone": ("abd_pain",),
                       "furosemide": ("edema", "sob"), "albuterol": ("wheezing", "sob")}
# section -> header forms (the renderer may also upper-case them and put them on their own line)
VARIED_HEADERS: dict[str, tuple[str, ...]] = {
    "cc": ("CC:", "Chief complaint:", "Chief Complaint:", "Reason for admission:"),
    "hpi": ("HPI:", "History of present illness:", "HPI", "History:", "Subjective:"),
    "pmh": ("PMH:", "PMHx:", "Past medical history:", "Past Medical History:", "PMH/PSH:"),
    "home_meds": ("Home meds:", "Meds on admission:", "Outpatient medications:", "Home medications:",
                  "Medications prior to admission:", "Meds:"),
    "ros": ("ROS:", "Review of systems:", "ROS"),
    "studies": ("Labs:", "Labs/imaging:", "Data:", "Pertinent results:", "Studies:", "Labs and studies:"),
    "course": ("Hospital course:", "Brief hospital course:", "Course:", "Hosp course:", "Hospital Course:"),
    "ap": ("A/P:", "Assessment and plan:", "Assessment/Plan:", "A&P:", "Impression/Plan:", "Plan:"),
    "dx": ("Discharge dx:", "Discharge diagnoses:", "Dx:", "Final diagnoses:", "Diagnoses:", "Problem list:"),
    "dc_meds": ("Discharge meds:", "Discharge medications:", "Meds on discharge:", "D/C meds:", "Meds:"),
    "dispo": ("Dispo:", "Disposition:", "Discharged to:"),
}
# list layouts: (marker before each item, with {k} for its number) or an inline separator
LIST_MARKERS = ("- ", "* ", "{k}. ", "{k}) ", "#{k} ", "• ")
INLINE_SEPARATORS = (", ", "; ", ", ")
# organ system -> treatments an admission for it typically gets (names of GENERIC_TREATMENTS or drugs)
SYSTEM_TREATMENTS: dict[str, tuple[str, ...]] = {
    "heart": ("diuresis", "oxygen", "furosemide"), "coronary": ("aspirin", "nitroglycerin", "heparin"),
    "rhythm": ("metoprolol", "diltiazem", "anticoagulants"),
    "airway": ("nebulizers", "oxygen", "noninvasive ventilation"),
    "lung": ("oxygen", "antibiotics", "noninvasive ventilation"), "infection": ("antibiotics", "intravenous fluids"),
    "liver": ("lactulose", "paracentesis", "rifaximin"), "gi": ("transfusion", "pantoprazole", "octreotide"),
    "kidney": ("intravenous fluids", "dialysis"), "neuro": ("intravenous fluids", "levetiracetam"),
    "cancer": ("chemotherapy", "ondansetron"), "metabolic": ("insulin", "intravenous fluids"),
    "blood": ("transfusion",), "general": ("intravenous fluids", "acetaminophen"),
}
# drugs a patient takes at home / may go home on (the others are hospital-only: IV antibiotics, drips...)
HOME_DRUGS = ("lisinopril", "metoprolol", "carvedilol", "furosemide", "spironolactone", "insulin", "aspirin",
              "donepezil", "levetiracetam", "lactulose", "rifaximin", "albuterol", "ipratropium", "anticoagulants",
              "antiplatelet agents", "opiate analgesics", "oral hypoglycemic drugs", "pantoprazole", "amiodarone",
              "diltiazem", "esomeprazole", "atorvastatin", "levothyroxine", "allopurinol", "sertraline", "omeprazole",
              "tamsulosin", "thiamine")
DISCHARGE_DRUGS = HOME_DRUGS + ("prednisone", "azithromycin", "levofloxacin", "ciprofloxacin", "metronidazole",
                                "acetaminophen", "ondansetron", "enoxaparin", "dexamethasone", "fluconazole",
                                "labetalol")

# --- varied-style sentences. Slots: {age} {S} (M/F) {sex} {a} (a/an) {Name} {Pt} {pt} {pmh} {sx} (symptoms)
# {dur} {cc} {p} / {P} (the problem in focus) {tx} {txs} {test} {Test} {finding} {result} {n} {plan}
# {hold_tx} {hold_why}; negated: {neg} (symptoms), {ruled} (a differential, the cue in the template), {tneg} (a
# test-result negation); uncertain: {unc}, {probe}. A test, finding, differential and treatment of one
# sentence belong together (DIFFERENTIAL_WORKUP, FINDING_WORKUP).
VARIED_HPI_OPEN = {
    True: ("{age} y/o {S}{pmh} p/w {sx}{dur}.", "{age} yo {S}{pmh} c/o {sx}{dur}.",
           "{age} {S}{pmh} presents w/ {sx}{dur}.", "Pt is {a} {age} y/o {S}{pmh} here w/ {sx}{dur}.",
           "{age} y/o {S}{pmh} admitted w/ {sx}{dur}, found to have {cc}."),
    False: ("{Name} is {a} {age}-year-old {sex}{pmh} who presents with {sx}{dur}.",
            "This is {a} {age}-year-old {sex}{pmh} who presented with {sx}{dur} and was found to have {cc}.",
            "The patient is {a} {age}-year-old {sex}{pmh} admitted with {sx}{dur}."),
}
VARIED_PMH_INTROS = {True: (" w/ h/o ", " w/ PMH of ", " w/ hx of ", " h/o ", " w/ "),
                     False: (" with a history of ", " with a past medical history of ", " with ")}
VARIED_DURATIONS = {True: (" x {n} days", " x{n}d", " x 1 wk", " since yesterday", "", ""),
                    False: (" for {n} days", " for the past week", " since yesterday", "", "")}
VARIED_HPI_MORE = {
    True: {
        "home": ("On {txs} at home.", "Home regimen incl {txs}.", "Takes {txs}.", "Ran out of {tx} {n} days ago.",
                 "Recently started on {tx} by PCP.", "Reports adherence to {txs}.", "Stopped taking {tx} 1 wk ago."),
        "neg": ("Denies {neg}.", "No {neg}.", "ROS neg for {neg}.", "Pt denies {neg}.", "Neg for {neg}."),
        "ed": ("In ED, {test} showed {finding}.", "ED w/u notable for {finding} on {test}.", "{test} in ED {result}.",
               "Given {tx} in ED and admitted.", "Started on {tx} for {unc}.", "{test} obtained to {probe}.",
               "{test} {tneg}.", "Initial {test} w/o e/o {ruled}."),
    },
    False: {
        "home": ("Home medications include {txs}.", "{Pt} takes {txs} at home.",
                 "{Pt} ran out of {tx} several days before admission.", "{Pt} was recently started on {tx} by the PCP.",
                 "{Pt} reports taking {txs} as prescribed."),
        "neg": ("{Pt} denies {neg}.", "{Pt} reports no {neg}.", "There was no {neg}.", "{Pt} has had no {neg}."),
        "ed": ("In the emergency department, {test} showed {finding}.", "{Test} was negative for {ruled}.",
               "{Pt} received {tx} and was admitted to medicine.", "{Test} was obtained to {probe}.",
               "{Pt} was started on {tx} for {unc}.", "{Test} showed no evidence of {ruled}."),
    },
}
VARIED_COURSE_OPEN = {True: ("Admitted for {cc}.", "Admitted w/ {cc}, {unc}.", "Pt admitted to medicine for {cc}."),
                      False: ("{Pt} was admitted to medicine for {cc}.", "{Pt} was admitted with {cc} and {unc}.",
                              "The primary issue this admission was {cc}.")}
VARIED_COURSE_SENTENCES = (
    "{Test} showed {finding} and {pt} was treated with {tx}.", "{Test} was negative for {ruled}.",
    "Course was complicated by {p}, managed with {tx}.", "{P} was treated with {tx} with improvement.",
    "{Pt} received {tx} for {p}.", "Home {hold_tx} was held in the setting of {hold_why}.",
    "{Test} was obtained to {probe} and was {result}.", "{P} remained stable on {tx}.",
    "{Pt} was started on {tx} for {unc}; {ruled} was later ruled out by {test}.",
)
VARIED_PROBLEM_PLANS = (
    "tx'd w/ {tx}, improved.", "s/p {n} days of {tx}.", "started {tx}; {test} {result}.",
    "{test} showed {finding}, started on {tx}.", "{test} neg for {ruled}.", "cont {tx}, f/u {test} as outpt.",
    "held {hold_tx} given {hold_why}.", "monitored, stable.", "{ruled} ruled out w/ serial {test}.",
    "on {tx}, trend {test}.", "improved w/ {tx}.", "{test} c/w {finding}; {tx} started.", "treated for {unc} w/ {tx}.",
    "{test} {tneg}, cont {tx}.", "recheck {test} in 1 wk.",
)
VARIED_COURSE_CHRONIC = ("{P} remained stable on {tx}.", "{Pt} was continued on {tx} for {p}.",
                         "For {p}, home {tx} was continued.")
VARIED_COURSE_QUIET = ("{P} was monitored and remained stable.", "{P} was noted and managed as an outpatient.",
                       "Course was complicated by {p}.", "{P} was stable throughout.")
# plans for a problem outside ACUTE_SYSTEMS: about its treatment, or nothing
VARIED_CHRONIC_PLANS = ("cont {tx}.", "on {tx}, stable.", "home {tx} continued.", "stable on {tx}.")
VARIED_QUIET_PLANS = ("monitored, stable.", "stable.", "at baseline.", "outpt f/u.", "chronic, stable.")
VARIED_PROBLEM_LINES = ("{p}: {plan}", "{p} - {plan}", "{p}. {plan}", "{p}: {plan}")
VARIED_AP_OPEN = {True: ("{age} y/o {S}{pmh} admitted w/ {cc}.", "{age} yo {S} here w/ {cc}, improving."),
                  False: ("In summary, {a} {age}-year-old {sex}{pmh} admitted for {cc}.",
                          "{Name} is {a} {age}-year-old {sex} admitted with {cc}, now improved.")}
VARIED_STUDY_LINES = ("{test}: {result}", "{test}: {finding}", "{test} {tneg}", "{test} c/w {finding}",
                      "{test} w/ {finding}", "{test} {result}")
VARIED_ROS = ("(+) {sx}; (-) {neg}", "Positive for {sx}. Negative for {neg}.", "Negative for {neg} except as per HPI.",
              "Denies {neg}.", "Pt denies {neg}. Endorses {sx}.")
TEST_NEGATIONS = ("neg for {p}", "negative for {p}", "w/o e/o {p}", "without evidence of {p}", "no {p}",
                  "no evidence of {p}", "ruled out {p}")
UNCERTAIN_MODIFIERS = ("possible {p}", "?{p}", "likely {p}", "suspected {p}", "presumed {p}", "probable {p}",
                       "questionable {p}", "c/f {p}", "concern for {p}")
UNCERTAIN_CLAUSES = ("r/o {p}", "rule out {p}", "eval for {p}", "evaluate for {p}", "assess for {p}")
RESULTS_PLAIN = ("unremarkable", "negative", "WNL", "within normal limits", "pending", "neg", "unchanged")
