"""Input variants: which dimensions vary, and what each variant changes."""

from __future__ import annotations

import torch

from torchpact.audit.variants import SHAPE, VALUE, infer_dims, make_variants


def test_token_inputs_get_batch_and_sequence_dims():
    ids = torch.randint(3, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    dims = infer_dims((ids,), {"attention_mask": mask, "use_cache": False})
    assert dims.describe() == {"batch": 2, "seq": 8}
    assert dims.of_leaf(0) == {0: "batch", 1: "seq"} and dims.of_leaf(1) == {0: "batch", 1: "seq"}
    names = [v.name for v in make_variants((ids,), {"attention_mask": mask, "use_cache": False})]
    assert names[:5] == ["example", "batch=1", "batch=5", "seq=4", "seq=16"]
    assert "random values" in names and "values x10" not in names  # no float input to scale


def test_shape_variants_repeat_the_example_and_keep_masks():
    ids = torch.arange(16).reshape(2, 8)
    mask = torch.ones(2, 8, dtype=torch.long)
    variants = {v.name: v for v in make_variants((ids,), {"attention_mask": mask})}
    long = variants["seq=16"]
    assert long.kind == SHAPE and torch.equal(long.args[0][:, 8:], ids)
    assert torch.equal(variants["batch=5"].args[0][2], ids[0])
    rand = variants["random values"]
    assert rand.kind == VALUE and torch.equal(rand.kwargs["attention_mask"], mask)  # masks keep their values
    assert int(rand.args[0].min()) >= 0 and int(rand.args[0].max()) <= 15


def test_images_get_a_batch_dim_and_value_variants():
    x = torch.randn(2, 3, 8, 8)
    dims = infer_dims((x,), {})
    assert dims.describe() == {"batch": 2}
    variants = {v.name: v for v in make_variants((x,), {})}
    assert set(variants) >= {"example", "batch=1", "batch=5", "values x0.1", "values x10", "values negated",
                             "values zero", "random values"}
    assert torch.equal(variants["values x10"].args[0], x * 10)


def test_one_dimensional_input_has_no_batch_guess():
    assert infer_dims((torch.randn(3),), {}).describe() == {}
