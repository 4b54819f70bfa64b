"""An HF Trainer fine-tune of a tiny randomly initialised GPT-2 on random tokens (no download)."""

import os
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("TP_BENCH_THREADS", "1")))


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, vocab: int):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


config = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=2)
model = GPT2LMHeadModel(config)
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, max_steps=int(os.environ.get("TP_BENCH_STEPS", "40")),
                             per_device_train_batch_size=8, learning_rate=1e-3, logging_steps=10,
                             save_strategy="no", report_to=[], use_cpu=True, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True)
    result = Trainer(model=model, args=args, train_dataset=Tokens(320, 32, 256)).train()
print(f"train_runtime {result.metrics['train_runtime']:.4f}")
