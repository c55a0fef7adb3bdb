"""Tables with a privacy schema: specs, loaders, bundled real data, splits and encoders (no torch).

Names load on first use: a command that reads a spec and counts rows does not import dp-accounting (the
encoder's DP bounds) before it has checked its inputs.
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("BUNDLED", "bundled_spec", "load_dataset"), "datasets"),
    **dict.fromkeys(("TableEncoder", "public_view", "replace_private"), "encoding"),
    **dict.fromkeys(("ColumnSpec", "TableSchema", "load_spec", "save_spec"), "schema"),
    **dict.fromkeys(("split_indices", "split_table"), "splits"),
    **dict.fromkeys(("count_rows", "load_table", "read_table"), "tables"),
})
