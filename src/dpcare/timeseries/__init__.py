"""Clinical time series: event tables, bundled data, binning, standardisation and windows; the forecasting
recipe (:mod:`dpcare.timeseries.recipe`: fit a forecaster on a hospital's events, save, load, forecast) and
its membership attacks (:mod:`dpcare.timeseries.attacks`).

Names load on first use, so ``dpcare.timeseries.settings`` (what the command line needs) imports no torch.
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("BinnedStays", "Standardizer", "bin_events"), "binning"),
    **dict.fromkeys(("DATASETS", "TimeSeriesDataset", "events_dataset", "load_events", "mimic_demo_events",
                     "patient_ids", "pbcseq_events", "user_dataset"), "datasets"),
    **dict.fromkeys(("EVENT_COLUMNS", "read_clif", "read_meds", "read_mimic_csv", "validate_events"), "events"),
    **dict.fromkeys(("WindowSet", "check_patient_splits", "make_windows", "split_patients", "split_sizes",
                     "windows_for"), "windows"),
    **dict.fromkeys(("ForecastModel", "fit", "plan"), "recipe"),
    "ForecastSettings": "settings",
})
