"""Proofs for security rules: a checkpoint that runs code when it is unpickled, loaded for real."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from torchpact.config import Config, load_config
from torchpact.findings import Severity
from tests.lint_helpers import codes, lint_code


class _RunsCodeWhenLoaded:
    """Unpickling this calls ``open(marker, "w")``: harmless, visible, and as arbitrary as ``os.system``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def malicious(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "checkpoint.pt"
    torch.save({"weight": torch.zeros(2), "payload": _RunsCodeWhenLoaded(marker)}, path)
    return path, marker


def _load(*args, **kwargs):
    obj = torch.load(*args, **kwargs)
    obj["payload"].close()  # the file object the payload opened
    return obj


@pytest.mark.proves("TP951")
def test_full_unpickling_runs_code_from_the_checkpoint(malicious):
    path, marker = malicious
    with pytest.raises(pickle.UnpicklingError) as refused:
        torch.load(path)  # default since torch 2.6: weights_only=True
    assert "Weights only load failed" in str(refused.value)
    assert "Unsupported global: GLOBAL io.open was not an allowed global by default" in str(refused.value)
    assert not marker.exists()

    _load(path, weights_only=False)
    assert marker.exists()  # the file's code ran at load time


@pytest.mark.proves("TP951")
def test_pickle_module_turns_full_unpickling_on(malicious):
    path, marker = malicious
    _load(path, pickle_module=pickle)  # weights_only defaults to False when pickle_module is given
    assert marker.exists()
    with pytest.raises(RuntimeError, match="Can not safely load weights when explicit pickle_module is specified"):
        torch.load(path, pickle_module=pickle, weights_only=True)


@pytest.mark.proves("TP951")
def test_load_state_dict_from_url_fully_unpickles_by_default(malicious, tmp_path):
    path, marker = malicious
    cache = tmp_path / "hub"
    cache.mkdir()
    # A file already in the hub cache is loaded without downloading: what a poisoned cache or a
    # malicious URL would deliver.
    (cache / "resnet.pth").write_bytes(path.read_bytes())
    url = "https://example.invalid/models/resnet.pth"
    with pytest.raises(pickle.UnpicklingError):
        torch.hub.load_state_dict_from_url(url, model_dir=str(cache), weights_only=True)
    assert not marker.exists()
    torch.hub.load_state_dict_from_url(url, model_dir=str(cache))["payload"].close()
    assert marker.exists()


@pytest.mark.proves("TP952")
def test_the_pre_2_6_default_runs_code_and_an_explicit_weights_only_does_not(malicious, monkeypatch):
    path, marker = malicious
    with pytest.raises(pickle.UnpicklingError) as refused:
        torch.load(path)
    assert ("In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` "
            "from `False` to `True`") in str(refused.value)

    # torch's own switch back to the old default, for calls that do not pass weights_only
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)  # an explicit choice is not overridden
    assert not marker.exists()
    with pytest.warns(UserWarning, match="forcing weights_only=False"):
        _load(path)
    assert marker.exists()


LOAD = """
import torch
state = torch.load("checkpoint.pt", map_location="cpu")
safe = torch.load("checkpoint.pt", weights_only=True)
"""


def test_tp952_follows_the_configured_minimum_torch(tmp_path):
    assert codes(LOAD, ["TP952"]) == []  # default: the installed torch 2.13
    assert codes(LOAD, ["TP952"], config=Config(min_torch=(2, 6))) == []
    assert codes(LOAD, ["TP952"], config=Config(min_torch=(2, 4))) == ["TP952"]

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["torch>=2.1", "numpy"]\n')
    assert codes(LOAD, ["TP952"], config=load_config(pyproject)) == ["TP952"]
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["torch>=2.1"]\n[tool.torchpact]\nmin-torch = "2.7"\n')
    assert codes(LOAD, ["TP952"], config=load_config(pyproject)) == []


def test_tp952_reads_a_scripts_inline_metadata():
    script = '# /// script\n# dependencies = ["torch>=2.6"]\n# ///\n' + LOAD
    assert codes(script, ["TP952"]) == []
    assert codes(script.replace("2.6", "2.5"), ["TP952"]) == ["TP952"]
    # the script's floor lowers a newer configured floor, never raises an older one
    assert codes(script, ["TP952"], config=Config(min_torch=(2, 4))) == ["TP952"]


# A test module reads fixtures its repository ships or writes: TP952 is silent there, unless the test
# fetches the checkpoint from the network, which is untrusted input in a test as anywhere.
FROM_FIXTURES = [
    ("import os\nimport torch\nFIXTURES = os.path.dirname(__file__)\n"
     "def test_load():\n    torch.load(os.path.join(FIXTURES, 'ckpt.pt'))\n"),
    ("import torch\ndef test_round_trip(tmp_path):\n    torch.save({'w': 1}, tmp_path / 'm.pt')\n"
     "    assert torch.load(tmp_path / 'm.pt')\n"),
    ("from pathlib import Path\nimport torch\nWEIGHTS = Path(__file__).parent / 'data' / 'w.pt'\n"
     "def test_weights():\n    state = torch.load(WEIGHTS, map_location='cpu')\n"),
    ("import io\nimport torch\ndef test_buffer():\n    buf = io.BytesIO()\n    torch.save([1], buf)\n"
     "    buf.seek(0)\n    torch.load(buf)\n"),
    ("import pytest\nimport torch\n@pytest.mark.parametrize('path', ['a.pt', 'b.pt'])\n"
     "def test_each(path):\n    torch.load(path)\n"),
]
DOWNLOADED = [
    ("import torch\nfrom huggingface_hub import hf_hub_download\ndef test_hub():\n"
     "    path = hf_hub_download('org/model', 'pytorch_model.bin')\n    torch.load(path)\n"),
    ("import urllib.request\nimport torch\nURL = 'https://example.com/w.pt'\ndef test_url():\n"
     "    local, _ = urllib.request.urlretrieve(URL, 'w.pt')\n    torch.load(local, map_location='cpu')\n"),
    ("import torch\ndef test_hub_file(tmp_path):\n    dst = tmp_path / 'w.pt'\n"
     "    torch.hub.download_url_to_file(MODEL_URL, dst)\n    torch.load(dst)\n"),
    ("import io\nimport requests\nimport torch\ndef test_http():\n"
     "    state = torch.load(io.BytesIO(requests.get(CKPT).content))\n"),
    ("import torch\nfrom cached_path import cached_path\ndef test_cached():\n"
     "    torch.load(cached_path('https://example.com/ckpt.pt'), map_location='cpu')\n"),
]


@pytest.mark.parametrize("code", FROM_FIXTURES)
def test_tp952_stays_silent_on_a_test_modules_own_fixtures(code):
    assert codes(code, ["TP952"], path="tests/test_model.py", config=Config(min_torch=(2, 4))) == []


@pytest.mark.parametrize("code", DOWNLOADED)
def test_tp952_flags_a_test_that_downloads_the_checkpoint_it_loads(code):
    assert codes(code, ["TP952"], path="tests/test_model.py", config=Config(min_torch=(2, 4))) == ["TP952"]
    assert codes(code, ["TP952"], path="tests/test_model.py") == []  # torch >= 2.6 loads weights only


@pytest.mark.parametrize("code", DOWNLOADED)
def test_tp951_warns_where_a_downloaded_file_is_fully_unpickled(code):
    spelled = code.replace("torch.load(", "torch.load(weights_only=False, f=")
    findings, _ = lint_code(spelled, ["TP951"], path="tests/test_model.py")
    assert [(f.code, f.severity) for f in findings] == [("TP951", Severity.WARNING)]
    for own in FROM_FIXTURES:
        findings, _ = lint_code(own.replace("torch.load(", "torch.load(weights_only=False, f="), ["TP951"],
                                path="tests/test_model.py")
        assert all(f.severity == Severity.INFO for f in findings)
