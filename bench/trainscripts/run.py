"""Correct training scripts written here under `torchpact run`: any warning or error is a false alarm,
except on the one script that keeps a bug on purpose (it must get exactly that finding).

Each script in this folder is a plain, self-contained training script with synthetic data,
exercising one pattern real training code uses (see README.md); the arguments below keep each run
to seconds. Prints one row per script (steps seen, findings by severity) and exits 1 when any script
gets a warning or an error it should not, misses its expected finding, or does not finish.

    .venv/bin/python bench/trainscripts/run.py [-j N] [-v] [--json FILE] [SCRIPT ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from scriptbench import Script, in_place, main  # noqa: E402

SCRIPTS = (
    Script("manual_sgd", "manual_sgd.py"),
    Script("cnn_classifier", "cnn_classifier.py", ("--epochs", "1", "--train", "256", "--test", "64")),
    Script("lstm_classifier", "lstm_classifier.py", ("--epochs", "1", "--train", "256", "--test", "64")),
    Script("lbfgs_sequence", "lbfgs_sequence.py"),
    Script("gan", "gan.py"),
    Script("vae", "vae.py", ("--epochs", "1")),
    Script("forward_forward", "forward_forward.py"),
    Script("rnn_lm_lstm_manual_sgd", "rnn_lm.py", ("--cell", "lstm", "--update", "manual")),
    Script("rnn_lm_gru_tied_adamw", "rnn_lm.py", ("--cell", "gru", "--tied", "--update", "adamw")),
    Script("transformer_lm", "transformer_lm.py"),
    Script("super_resolution", "super_resolution.py"),
    Script("gcn", "gcn.py"),
    Script("gat", "gat.py"),
    Script("policy_gradient", "policy_gradient.py"),
    Script("actor_critic", "actor_critic.py"),
    Script("ddp_gloo", "ddp_gloo.py", nproc=2),
    # The bug kept on purpose: cross_entropy over one logit is always 0, and TP252 must name it.
    Script("single_logit_ce", "single_logit_ce.py", expected=("TP252",)),
)

if __name__ == "__main__":
    sys.exit(main(SCRIPTS, in_place(HERE), __doc__.splitlines()[0]))
