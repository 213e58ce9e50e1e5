#!/usr/bin/env bash
# The wheels the TPU machine lacks for the MinAtar and CartPole parts of tpu_session.sh, into
# .whl-tpu/ (ignored by git; name it in the device call's carry). The chip's machine has JAX,
# numpy and scipy, and tpu_session.sh installs matplotlib, pandas, tensorstore, msgpack, pyyaml,
# pillow, protobuf and psutil from its own index; the rest travels. Versions are this venv's, so
# the chip runs what the tests here ran. Run from an activated venv holding evorl[bench]:
#
#   benchmarks/tpu_wheels.sh && ls .whl-tpu
set -eu
cd "$(dirname "$0")/.."
mkdir -p .whl-tpu
pins=()
for name in flax optax chex gymnax gymnasium Farama-Notifications cloudpickle six hydra-core omegaconf \
  hydra-joblib-launcher joblib orbax-checkpoint etils humanize aiofiles simplejson rich markdown-it-py mdurl \
  Pygments imageio treescope wadler_lindig jaxtyping toolz typing_extensions evosax dotmap zipp fsspec optree \
  absl-py seaborn; do
  pins+=("$name==$(python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any -d .whl-tpu "${pins[@]}"
# omegaconf's parser runtime is published as a source archive only: built here (pure Python)
python -m pip wheel -q --no-deps -w .whl-tpu \
  "antlr4-python3-runtime==$(python -c "import importlib.metadata as m; print(m.version('antlr4-python3-runtime'))")"
