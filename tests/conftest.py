import faulthandler
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

torch.set_num_threads(1)

#: pytest-timeout's limit for tests marked slow (the others take pyproject's ``timeout``)
SLOW_TEST_TIMEOUT = 1200
#: a test still running this long after its limit is stuck where pytest-timeout's signal cannot reach (C code:
#: gloo, Ray, a child's pipe): faulthandler dumps every thread's stack and ends the process, so xdist reports the
#: worker lost while running that test and, with --max-worker-restart=0 (pyproject's addopts), ends the run at once
STUCK_GRACE = float(os.environ.get("DPCARE_TEST_STUCK_GRACE", "60"))
#: folder for those dumps (scripts/test.sh sets it and prints what lands there); unset: the worker's stderr
DUMPS_ENV = "DPCARE_TEST_DUMPS"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT))


def _limit(item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


def _dump_file(config):
    folder = os.environ.get(DUMPS_ENV)
    if not folder:
        return None
    if not hasattr(config, "_dpcare_dump"):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        config._dpcare_dump = open(Path(folder) / f"stuck-{worker}.txt", "w")  # noqa: SIM115 (process lifetime)
    return config._dpcare_dump


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arm the last-resort dump for the test about to run (see STUCK_GRACE), naming it first in the dump."""
    limit = _limit(item)
    if limit <= 0:
        yield
        return
    out = _dump_file(item.config)
    if out is not None:
        out.seek(0)
        out.truncate()
        out.write(f"{item.nodeid}, {limit:.0f} s limit, was still running {limit + STUCK_GRACE:.0f} s after it "
                  "began:\n")
        out.flush()
    faulthandler.dump_traceback_later(limit + STUCK_GRACE, exit=True,
                                      file=out if out is not None else sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        if out is not None:
            out.seek(0)
            out.truncate()


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A tiny random GPT-2 saved as a local Hugging Face folder (path as str)."""
    from lm_fixtures import tiny_gpt2

    folder = tmp_path_factory.mktemp("tiny-gpt2")
    model, tok = tiny_gpt2()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def minilm_tok():
    """The real all-MiniLM-L6-v2 fast tokenizer (the tagger tests' vocabulary)."""
    from lm_fixtures import minilm_tokenizer

    return minilm_tokenizer()


@pytest.fixture(scope="module")
def notes20():
    """20 generated notes (corpus seed 0)."""
    from dpcare.text import generate_corpus

    return generate_corpus(20, seed=0)


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A tiny random BERT token classifier with the MiniLM tokenizer, saved as a local folder (path as str)."""
    from lm_fixtures import minilm_tokenizer, tiny_bert

    tok = minilm_tokenizer()
    folder = tmp_path_factory.mktemp("tiny-bert")
    tiny_bert(tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)
