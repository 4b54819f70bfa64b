"""The Hugging Face Trainer callback, with the real library on a tiny BERT built from a config (nothing downloaded)."""

from __future__ import annotations

import json
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (requirements-dev.txt)")

from torchpact.integrations.transformers import TorchpactCallback  # noqa: E402


def _hooks() -> int:
    import torch.nn.modules.module as m
    import torch.optim.optimizer as o

    return (len(m._global_forward_hooks) + len(m._global_forward_pre_hooks) + len(o._global_optimizer_pre_hooks)
            + len(o._global_optimizer_post_hooks))


class Rows(torch.utils.data.Dataset):
    def __init__(self, n=48):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, 100, (n, 12), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long), "labels": self.labels[i]}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")


def test_train_is_watched_and_report_written(tmp_path):
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=8, learning_rate=1e-3,
        report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, seed=0)
    before = _hooks()
    cb = TorchpactCallback(report=str(tmp_path / "report.json"), html=str(tmp_path / "report.html"), live=False)
    transformers.Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[cb]).train()
    assert _hooks() == before and not cb.fit.active
    assert cb.fit.steps == 6
    assert [s for s, _ in cb.data["progress"]["loss"]] == list(range(6))  # the model output's `loss`
    assert "Loss (checked steps)" in (tmp_path / "report.html").read_text()
    layers = set(cb.data["grad_health"]["series"])
    assert any(name.startswith("bert.encoder.layer.0") for name in layers), sorted(layers)[:5]
    assert not [f for f in cb.findings if f.severity.value == "error"], [f.message for f in cb.findings]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["command"] == "transformers train" and doc["summary"]["steps"] == 6
    assert os.path.getsize(tmp_path / "report.html") > 2000


def test_close_after_a_failed_train_removes_the_hooks():
    before = _hooks()
    cb = TorchpactCallback(live=False)
    with cb:
        cb.on_train_begin(None, None, None)
        assert _hooks() > before
    assert _hooks() == before and not cb.fit.active
