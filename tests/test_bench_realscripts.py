"""bench/realscripts: pytorch/examples is fetched when the bench runs, never kept here. Without a source
the bench says so in one line and exits 0; a mirror given as a tarball is unpacked into the cache and
its files run as they are, with the stand-ins first on their path. The stand-ins themselves: a
cart-pole that follows the equations of motion, PNG files that round-trip, transforms that give the
shapes torchvision's give, and no network.
"""

from __future__ import annotations

import io
import math
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "bench" / "realscripts"
STANDINS = BENCH / "standins"
sys.path.insert(0, str(BENCH))

import offline_data  # noqa: E402
import upstream  # noqa: E402


@pytest.fixture
def standins(monkeypatch):
    """The stand-in packages importable for one test only (they shadow torchvision, PIL, requests...)."""
    monkeypatch.syspath_prepend(str(STANDINS))
    yield
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(STANDINS)):
            del sys.modules[name]


def run_bench(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, str(BENCH / "run.py"), *args], capture_output=True, text=True,
                          env={**base, **env}, timeout=600, check=False)


def test_without_a_source_the_bench_skips_in_one_line_and_exits_0(tmp_path):
    out = run_bench([], {"TORCHPACT_EXAMPLES_MIRROR": str(tmp_path / "nowhere")}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("skipped: no source for pytorch/examples (")
    assert len(out.stdout.strip().splitlines()) == 1


def test_a_folder_without_the_examples_or_a_repository_without_the_commit_is_no_source(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHPACT_EXAMPLES_MIRROR", str(tmp_path))
    with pytest.raises(upstream.NoSource, match="has no regression/main.py"):
        upstream.locate(download=False)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.setenv("TORCHPACT_EXAMPLES_MIRROR", str(repo))
    with pytest.raises(upstream.NoSource, match="does not hold commit"):
        upstream.locate(download=False)


def own_tarball(path: Path, script: str) -> Path:
    """A GitHub-style archive (one top folder) holding only regression/main.py, with ``script`` as it."""
    with tarfile.open(path, "w:gz") as tgz:
        data = script.encode()
        info = tarfile.TarInfo(f"examples-{upstream.COMMIT}/regression/main.py")
        info.size = len(data)
        tgz.addfile(info, io.BytesIO(data))
    return path


def test_a_tarball_mirror_is_unpacked_and_its_script_runs_unmodified_with_the_standins(tmp_path):
    script = ("import torch, torchvision, gymnasium\n"
              "from torchvision import datasets, transforms\n"
              "data = datasets.MNIST('../data', train=True, transform=transforms.ToTensor())\n"
              "model = torch.nn.Linear(784, 10)\n"
              "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              "loader = torch.utils.data.DataLoader(data, batch_size=16)\n"
              "for x, y in loader:\n"
              "    opt.zero_grad()\n"
              "    torch.nn.functional.cross_entropy(model(x.flatten(1)), y).backward()\n"
              "    opt.step()\n")
    mirror = own_tarball(tmp_path / "examples.tar.gz", script)
    out = run_bench(["regression"], {"TORCHPACT_EXAMPLES_MIRROR": str(mirror), "STANDIN_TRAIN_SIZE": "64"}, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("regression"))
    assert row.split()[1:5] == ["4", "0", "0", "0"]  # 4 steps, no finding
    cached = tmp_path / "cache" / "torchpact" / f"pytorch-examples-{upstream.COMMIT[:12]}" / "regression" / "main.py"
    assert cached.read_text() == script


def test_the_cart_pole_follows_the_equations_of_motion(standins):
    import gymnasium
    # upright and still: no push, no motion; a push accelerates the cart that way and tips the pole back
    assert gymnasium.accelerations(0.0, 0.0, 0.0) == (0.0, 0.0)
    linear, angular = gymnasium.accelerations(0.0, 0.0, 10.0)
    total = gymnasium.CART_MASS + gymnasium.POLE_MASS
    expected_angular = -(10.0 / total) / (gymnasium.HALF_LENGTH * (4 / 3 - gymnasium.POLE_MASS / total))
    assert angular == pytest.approx(expected_angular)
    assert linear == pytest.approx(
        10.0 / total - gymnasium.POLE_MASS * gymnasium.HALF_LENGTH * expected_angular / total)
    # a tilted pole falls further (the upright position is unstable)
    assert gymnasium.accelerations(0.1, 0.0, 0.0)[1] > 0 > gymnasium.accelerations(-0.1, 0.0, 0.0)[1]
    env = gymnasium.make("CartPole-v1")
    state, _ = env.reset(seed=3)
    assert state.shape == (4,) and max(abs(state)) <= 0.05
    steps = 0
    while True:
        state, reward, terminated, truncated, _ = env.step(1)  # always push right: the pole falls left
        steps += 1
        if terminated or truncated:
            break
    assert reward == 1.0 and terminated and 5 < steps < 30 and state[2] < -math.radians(12)


def test_png_round_trip_ycbcr_and_transforms_give_torchvisions_shapes(tmp_path, standins):
    from PIL import Image
    from torchvision import transforms

    offline_data.image_folders(tmp_path, train=1, test=0, side=40)
    path = next((tmp_path / "BSDS300" / "images" / "train").iterdir())
    picture = Image.open(str(path))
    assert picture.mode == "RGB" and picture.size == (40, 40)
    y, _, _ = picture.convert("YCbCr").split()
    grey = picture.convert("L")
    assert y.mode == "L" and (y.pixels.int() - grey.pixels.int()).abs().max() <= 1
    low = transforms.Compose([transforms.CenterCrop(39), transforms.Resize(13), transforms.ToTensor()])(y)
    assert tuple(low.shape) == (1, 13, 13) and 0.0 <= float(low.min()) and float(low.max()) <= 1.0
    normalised = transforms.Normalize((0.5,), (0.5,))(transforms.ToTensor()(grey))
    assert tuple(normalised.shape) == (1, 40, 40) and float(normalised.min()) >= -1.0


def test_downloads_are_prepared_files_never_the_network(tmp_path, monkeypatch, standins):
    import requests
    from six.moves import urllib

    offline_data.cora_archive(tmp_path, nodes=50, words=20)
    monkeypatch.setenv("STANDIN_DOWNLOADS", str(tmp_path))
    with requests.get("https://linqs-data.soe.ucsc.edu/public/lbc/cora.tgz", stream=True) as answer, \
            tarfile.open(fileobj=answer.raw, mode="r:gz") as tgz:
        assert sorted(tgz.getnames()) == ["cora/cora.cites", "cora/cora.content"]
        content = tgz.extractfile("cora/cora.content").read().decode().splitlines()
    assert len(content) == 50 and all(len(line.split("\t")) == 22 for line in content)
    with pytest.raises(requests.ConnectionError, match="offline stand-in"):
        requests.get("https://example.org/data.tgz")
    with pytest.raises(OSError, match="offline stand-in"):
        urllib.request.urlopen("http://example.org/BSDS300-images.tgz")
