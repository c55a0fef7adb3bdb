"""Tables with a privacy schema: specs, loaders, bundled real data, splits and encoders (no torch)."""

from dpcare.data.datasets import BUNDLED, bundled_spec, load_dataset
from dpcare.data.encoding import TableEncoder, public_view, replace_private
from dpcare.data.schema import ColumnSpec, TableSchema, load_spec, save_spec
from dpcare.data.splits import split_indices, split_table
from dpcare.data.tables import count_rows, load_table, read_table

__all__ = [
    "BUNDLED", "ColumnSpec", "TableEncoder", "TableSchema", "bundled_spec", "load_dataset", "load_spec",
    "count_rows", "load_table", "public_view", "read_table", "replace_private", "save_spec", "split_indices", "split_table",
]
