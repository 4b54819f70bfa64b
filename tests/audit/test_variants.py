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
    # 1 and 2, half the example (not for a batch), past twice and past four times the example
    assert names[:9] == ["example", "batch=1", "batch=5", "batch=9", "seq=1", "seq=2", "seq=4", "seq=17", "seq=33"]
    assert "random values" in names and "values x10" not in names  # no float input to scale


def test_shape_variants_repeat_the_example_and_keep_masks():
    ids = torch.arange(16).reshape(2, 8)
    mask = torch.ones(2, 8, dtype=torch.long)
    variants = {v.name: v for v in make_variants((ids,), {"attention_mask": mask})}
    long = variants["seq=17"]
    assert long.kind == SHAPE
    assert torch.equal(long.args[0][:, 8:16], ids) and torch.equal(long.args[0][:, 16], ids[:, 0])
    assert torch.equal(variants["batch=5"].args[0][2], ids[0])
    rand = variants["random values"]
    assert rand.kind == VALUE and torch.equal(rand.kwargs["attention_mask"], mask)  # masks keep their values
    assert int(rand.args[0].min()) >= 0 and int(rand.args[0].max()) <= 15


def test_image_batches_get_batch_height_width_and_value_variants():
    x = torch.randn(2, 3, 8, 6)
    dims = infer_dims((x,), {})
    assert dims.describe() == {"batch": 2, "height": 8, "width": 6}
    assert dims.candidates == {"height", "width"}  # kept only where eager takes another size (not a ViT)
    assert dims.of_leaf(0) == {0: "batch", 2: "height", 3: "width"}
    variants = {v.name: v for v in make_variants((x,), {})}
    assert set(variants) >= {"example", "batch=1", "batch=5", "batch=9", "height=1", "height=2", "height=4",
                             "height=17", "height=33", "width=1", "width=2", "width=3", "width=13", "width=25",
                             "values x0.1", "values x10", "values negated", "values zero", "random values"}
    assert tuple(variants["height=17"].args[0].shape) == (2, 3, 17, 6)  # one axis at a time
    assert torch.equal(variants["height=17"].args[0][:, :, 8:16], x)  # the example's rows repeated
    assert tuple(variants["width=3"].args[0].shape) == (2, 3, 8, 3)
    assert torch.equal(variants["values x10"].args[0], x * 10)
    kept = dims.accepted([v for v in variants.values() if v.dim not in ("height", "width")])
    assert kept.describe() == {"batch": 2}  # eager rejected every other size: the axes are not dynamic


def test_one_dimensional_input_has_no_batch_guess():
    assert infer_dims((torch.randn(3),), {}).describe() == {}


def test_float_sequences_get_candidate_time_axes():
    x = torch.randn(2, 10, 6)
    dims = infer_dims((x,), {})
    assert dims.describe() == {"batch": 2, "time": 10, "length": 6}
    assert dims.candidates == {"time", "length"}
    names = [v.name for v in make_variants((x,), {}, dims)]
    assert {"time=5", "time=21", "time=41", "length=3", "length=13", "length=25"} <= set(names)
    # eager accepted only other time lengths (an LSTM over 6 features): the feature axis is dropped
    kept = dims.accepted([v for v in make_variants((x,), {}, dims) if v.dim != "length"])
    assert kept.describe() == {"batch": 2, "time": 10}
    audio = infer_dims((torch.randn(2, 400),), {})
    assert audio.describe() == {"batch": 2, "time": 400}


def test_token_inputs_make_no_float_candidates():
    ids = torch.randint(3, 100, (2, 8))
    dims = infer_dims((ids, torch.randn(2, 8, 4)), {})
    assert dims.describe() == {"batch": 2, "seq": 8} and not dims.candidates


def test_a_list_of_images_is_never_a_batch_of_channels():
    images = [torch.rand(3, 32, 24), torch.rand(3, 16, 16)]
    dims = infer_dims((images,), {})
    assert dims.describe() == {"height": 32, "width": 24, "images": 2}
    variants = {v.name: v for v in make_variants((images,), {}, dims)}
    assert [t.shape[0] for t in variants["images=5"].args[0]] == [3] * 5
    assert torch.equal(variants["images=5"].args[0][2], images[0])
    assert [tuple(t.shape) for t in variants["image size x2"].args[0]] == [(3, 64, 48), (3, 32, 32)]
    assert [tuple(t.shape) for t in variants["image size x0.5"].args[0]] == [(3, 16, 12), (3, 8, 8)]
    assert isinstance(variants["images=1"].args[0], list) and len(variants["images=1"].args[0]) == 1
