"""Clinical time series: event tables, bundled data, binning, standardisation and windows."""

from dpcare.timeseries.binning import BinnedStays, Standardizer, bin_events
from dpcare.timeseries.datasets import (
    DATASETS,
    TimeSeriesDataset,
    load_events,
    mimic_demo_events,
    pbcseq_events,
    user_dataset,
)
from dpcare.timeseries.events import (
    EVENT_COLUMNS,
    read_clif,
    read_meds,
    read_mimic_csv,
    validate_events,
)
from dpcare.timeseries.windows import (
    WindowSet,
    check_patient_splits,
    make_windows,
    split_patients,
    windows_for,
)

__all__ = [
    "DATASETS",
    "EVENT_COLUMNS",
    "BinnedStays",
    "Standardizer",
    "TimeSeriesDataset",
    "WindowSet",
    "bin_events",
    "check_patient_splits",
    "load_events",
    "make_windows",
    "mimic_demo_events",
    "pbcseq_events",
    "read_clif",
    "read_meds",
    "read_mimic_csv",
    "split_patients",
    "user_dataset",
    "validate_events",
    "windows_for",
]
