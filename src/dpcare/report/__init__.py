"""``dpcare report``: one self-contained HTML page for run and benchmark folders.

``collect`` reads a folder any dpcare command wrote into a :class:`Run` (guarantees with their ledger lines,
utility, attacks, configuration, timing); ``render`` / ``write_report`` turn runs into the page.
"""

from dpcare.report.collect import UnknownRunFolder, collect
from dpcare.report.html import render, write_report
from dpcare.report.model import Attack, LedgerLine, Privacy, Run

__all__ = ["Attack", "LedgerLine", "Privacy", "Run", "UnknownRunFolder", "collect", "render", "write_report"]
