"""The wheels a lent GPU machine lacks, gathered here for ``run``'s ``carry``.

The device machine has Python 3.12 and jax/flax/optax, no internet, and a call carries at
most 64 MiB of ignored paths. Two sets, each under that limit, one per call:

* ``base`` -> ``.whl/`` (~23 MB): brax, MuJoCo/MJX, gymnasium + ale-py, gymnax, Hydra, for
  ``benchmarks/gpu_session.sh``'s parts ``sac td3 check atari atari_processes``;
* ``envpool`` -> ``.whl-envpool/`` (~57 MiB): envpool 1.2.5 with its assets slimmed to the Atari
  ROMs and the small folders (the full ``envpool-assets`` wheel is 62 MB, mostly procgen,
  football, MuJoCo and ViZDoom files; the Atari ROMs are 0.6 MB), gymnasium, ale-py, Hydra,
  for the part ``atari_envpool``.

``gpu_session.sh`` installs every ``.whl*/*.whl`` it finds into ``/tmp/site``. Both folders
are git-ignored (``.git/info/exclude``), so only ``carry`` takes them across::

    python benchmarks/gpu_wheels.py envpool
    # run: command "PARTS=atari_envpool OUT=$OUT benchmarks/gpu_session.sh 420", carry [".whl-envpool"]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux2014_x86_64",
             "manylinux_2_17_x86_64", "any")
COMMON = ("gymnasium==1.3.0", "ale-py==0.12.1", "farama-notifications==0.0.6", "hydra-core==1.3.8",
          "omegaconf==2.3.1", "hydra-joblib-launcher==1.2.0", "optree==0.20.0",
          "dm-env==1.6", "dm-tree==0.1.10", "glfw==2.11.0")
SETS = {
    "base": (".whl", COMMON + ("brax==0.14.2", "mujoco==4.0.1", "mujoco-core==4.0.1", "mujoco-mjx==3.17.0",
                               "gymnax==1.0.1", "jaxopt==0.8.5", "ml-collections==1.1.0", "tensorboardx==2.6.5",
                               "trimesh==5.2.0")),
    "envpool": (".whl-envpool", COMMON + ("envpool==1.2.5", "types-protobuf", "envpool-assets==0.3.0")),
}
#: Pure-Python requirements PyPI has only as source: built into a wheel here.
BUILT = ("antlr4-python3-runtime==4.9.3",)  # Hydra 1.3's parser
LIMIT = 64 * 2**20  # bytes one call carries


def download(folder: Path, requirements: tuple[str, ...]) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", *platforms, "-d", str(folder), *requirements], check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), *BUILT], check=True)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


#: envpool-assets' large folders (procgen, football, MuJoCo robotics/DMC/Meta-World, ViZDoom's
#: binary: 139 of its 141 MB), left out of the wheel for the device as empty folders: envpool's
#: registrations only need them to exist at import.
DROPPED = ("gfootball/assets", "vizdoom/bin", "procgen/assets", "mujoco/robotics", "mujoco/assets_dmc",
           "mujoco/metaworld")


def slim_assets(wheel: Path) -> None:
    """Rewrites the ``envpool-assets`` wheel without its :data:`DROPPED` folders' files (each
    kept as an empty folder; RECORD rewritten to match): the Atari ROMs and the small folders
    stay."""
    kept, folders = {}, {f"envpool_assets/{d}/" for d in DROPPED}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".dist-info/RECORD"):
                record = name
            elif not any(name.startswith(f) for f in folders):
                kept[name] = z.read(name)
    lines = [record_line(n, d) for n, d in kept.items() if not n.endswith("/")] + [f"{record},,"]
    kept[record] = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for folder in sorted(folders):
            z.writestr(f"{folder}.keep", b"")
        for name, data in kept.items():
            z.writestr(name, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set", choices=sorted(SETS))
    args = parser.parse_args()
    name, requirements = SETS[args.set]
    folder = ROOT / name
    folder.mkdir(exist_ok=True)
    download(folder, requirements)
    for wheel in folder.glob("envpool_assets-*.whl"):
        slim_assets(wheel)
    size = sum(f.stat().st_size for f in folder.glob("*.whl"))
    print(f"{folder}: {len(list(folder.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB (a call carries 64 MiB)")
    if size > LIMIT:
        raise SystemExit(f"{folder} is over what one call carries")


if __name__ == "__main__":
    main()
