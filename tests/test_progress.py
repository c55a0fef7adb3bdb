"""Progress output: plain lines off a terminal, tqdm on one; quiet model loading."""

import io
import logging
import warnings

from tqdm import tqdm

from dpcare.progress import PlainProgress, progress, quiet_loading


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_off_a_terminal(monkeypatch):
    monkeypatch.delenv("DPCARE_PROGRESS", raising=False)
    out = io.StringIO()
    with progress(total=1000, desc="train", file=out) as bar:
        assert isinstance(bar, PlainProgress)
        for _ in range(1000):
            bar.update()
            bar.set_postfix({"loss": 0.5}, eps=1.0)
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text
    assert 1 <= len(lines) <= 11
    assert lines[-1].startswith("train: 100% (1000/1000)") and lines[-1].endswith("[loss=0.5, eps=1.0]")
    assert lines[0].startswith("train: 10% (100/1000)") and "left" in lines[0]


def test_plain_iteration_resume_and_early_stop(monkeypatch):
    monkeypatch.delenv("DPCARE_PROGRESS", raising=False)
    out = io.StringIO()
    assert list(progress(range(50), desc="it", file=out)) == list(range(50))
    assert out.getvalue().splitlines()[-1].startswith("it: 100% (50/50)")
    out = io.StringIO()
    bar = progress(total=100, initial=60, file=out)
    bar.update(40)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("100% (100/100)")  # 60 -> 100: one line, not five
    out = io.StringIO()
    bar = progress(total=100, file=out)
    for _ in range(33):  # stopped early: lines at 10, 20, 30 and the count at close
        bar.update()
    bar.close()
    bar.close()  # idempotent
    assert out.getvalue().splitlines()[-1].startswith("33% (33/100)")
    assert len(out.getvalue().splitlines()) == 4


def test_a_terminal_gets_tqdm_and_disable_or_off_prints_nothing(monkeypatch):
    monkeypatch.delenv("DPCARE_PROGRESS", raising=False)
    tty = FakeTTY()
    bar = progress(total=10, desc="x", file=tty)
    assert isinstance(bar, tqdm)
    bar.update(10)
    bar.close()
    assert "\r" in tty.getvalue()
    quiet = io.StringIO()
    for _ in progress(range(10), file=quiet, disable=True):
        pass
    assert quiet.getvalue() == ""
    monkeypatch.setenv("DPCARE_PROGRESS", "plain")
    assert isinstance(progress(total=3, file=FakeTTY()), PlainProgress)
    monkeypatch.setenv("DPCARE_PROGRESS", "off")
    silent = FakeTTY()
    with progress(total=3, file=silent) as bar:
        bar.update(3)
    assert silent.getvalue() == ""


def test_quiet_loading_silences_and_restores():
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_loading():
            assert hf_logging.get_verbosity() == logging.ERROR and not hf_logging.is_progress_bar_enabled()
            warnings.warn_explicit("weights not used", UserWarning, "x.py", 1, module="transformers.modeling_utils")
            warnings.warn_explicit("kept", UserWarning, "y.py", 1, module="dpcare.synth")
    assert [str(w.message) for w in caught] == ["kept"]
    assert hf_logging.get_verbosity() == before and hf_logging.is_progress_bar_enabled()
