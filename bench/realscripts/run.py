"""pytorch/examples, unmodified, under `torchpact run`: real training scripts nobody wrote for torchpact,
so any warning or error is a false alarm (except a bug of upstream's, kept: it must be reported).

The sources are not in this repository: ``upstream.py`` gets the pinned commit (from the mirror named
by TORCHPACT_EXAMPLES_MIRROR, a cached copy, or a download). Each row copies one example's folder as
it is into a temporary folder, writes the data it would download (``offline_data.py``) and runs it
with ``standins/`` first on its PYTHONPATH (synthetic torchvision datasets, a cart-pole written here,
prepared files instead of the network, no plotting). Without a source the bench prints
"skipped: no source for pytorch/examples" and exits 0. Rows that need CUDA are skipped without it.

    .venv/bin/python bench/realscripts/run.py [-j N] [-v] [--json FILE] [SCRIPT ...]
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import offline_data  # noqa: E402
import upstream  # noqa: E402
from scriptbench import Script, Setup, Skip, main  # noqa: E402

IMAGES = {"STANDIN_TRAIN_SIZE": "512", "STANDIN_TEST_SIZE": "128"}
WIKITEXT = ("--data", "synthetic-wikitext", "--epochs", "2", "--emsize", "64", "--nhid", "64", "--log-interval", "20")
SCRIPTS = (
    Script("regression", "regression/main.py"),
    Script("mnist", "mnist/main.py", ("--epochs", "1", "--batch-size", "32", "--test-batch-size", "64"), env=IMAGES),
    Script("mnist_rnn", "mnist_rnn/main.py", ("--epochs", "1", "--batch-size", "32", "--test-batch-size", "64"),
           env=IMAGES),
    Script("mnist_forward_forward", "mnist_forward_forward/main.py",
           ("--epochs", "20", "--train_size", "512", "--test_size", "128"), env=IMAGES),
    Script("vae", "vae/main.py", ("--epochs", "1", "--batch-size", "32"), env=IMAGES),
    Script("dcgan", "dcgan/main.py", ("--dataset", "fake", "--niter", "1", "--batchSize", "32", "--workers", "0",
                                      "--ngf", "16", "--ndf", "16"), env={"STANDIN_TRAIN_SIZE": "512"}),
    # torch.load of the NumPy array upstream's generator saves needs weights_only=False since torch 2.6.
    Script("time_sequence_prediction", "time_sequence_prediction/train.py", ("--steps", "1"),
           env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}),
    # Upstream trains until the running reward passes CartPole-v1's 475; 20 keeps it to a few dozen episodes.
    Script("reinforce", "reinforcement_learning/reinforce.py", env={"STANDIN_REWARD_THRESHOLD": "20"}),
    Script("actor_critic", "reinforcement_learning/actor_critic.py", env={"STANDIN_REWARD_THRESHOLD": "20"}),
    Script("word_language_model_lstm", "word_language_model/main.py", WIKITEXT),
    Script("word_language_model_transformer", "word_language_model/main.py",
           ("--model", "Transformer", "--use-optimizer", "--lr", "0.001", *WIKITEXT)),
    Script("word_language_model_gru_tied", "word_language_model/main.py",
           ("--model", "GRU", "--tied", "--use-optimizer", "--lr", "0.001", *WIKITEXT)),
    Script("super_resolution", "super_resolution/main.py",
           ("--upscale_factor", "3", "--batchSize", "4", "--testBatchSize", "4", "--nEpochs", "2", "--threads", "0")),
    Script("gcn", "gcn/main.py", ("--epochs", "40", "--val-every", "10")),
    Script("gat", "gat/main.py", ("--epochs", "20", "--val-every", "10")),
    # Upstream bug, kept: F.cross_entropy over the single output of nn.Linear(20, 1) is exactly 0 for any
    # input, so every gradient is 0 and the model never learns. The script puts the model on cuda:0.
    Script("ddp_tutorial_single_gpu", "distributed/ddp-tutorial-series/single_gpu.py",
           ("2", "5", "--batch_size", "128"), expected=("TP252",)),
)
NEEDS_CUDA = {"ddp_tutorial_single_gpu"}


def write_data(name: str, cwd: Path, downloads: Path) -> None:
    if name in ("gcn", "gat"):
        offline_data.cora_archive(downloads)
    elif name.startswith("word_language_model"):
        offline_data.wikitext(cwd / "synthetic-wikitext")
    elif name == "time_sequence_prediction":
        offline_data.sine_waves(cwd / "traindata.pt")
    elif name == "super_resolution":
        offline_data.image_folders(cwd / "dataset")


def prepare(script: Script, workdir: Path) -> Setup:
    if script.name in NEEDS_CUDA:
        import torch
        if not torch.cuda.is_available():
            raise Skip("needs CUDA (upstream puts the model on cuda:0)")
    example = Path(script.file).parent
    cwd = workdir / example
    shutil.copytree(SOURCE[0] / example, cwd)  # as it is at the pinned commit
    downloads = workdir / "downloads"
    write_data(script.name, cwd, downloads)
    path = os.pathsep.join(filter(None, (str(offline_data.STANDINS), os.environ.get("PYTHONPATH"))))
    return Setup(cwd, workdir / script.file, {"PYTHONPATH": path, "STANDIN_DOWNLOADS": str(downloads)})


SOURCE: list[Path] = []


def ready() -> None:
    try:
        SOURCE.append(upstream.locate())
    except upstream.NoSource as exc:
        raise Skip(f"no source for pytorch/examples ({exc})") from None


if __name__ == "__main__":
    sys.exit(main(SCRIPTS, prepare, __doc__.splitlines()[0], ready=ready))
