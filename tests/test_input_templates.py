"""The referee reads only the shapes and dtypes of the floating tensors `get_inputs()` returns (each is drawn afresh), so
it makes them on the meta device where it can (`inputs.templates_of`), and for real where their values or anything
else could be read."""

import torch

from evaluator.referee import inputs as draws


def test_floating_inputs_are_made_on_the_meta_device_with_their_shapes_and_dtypes():
    def get_inputs():  # 4 TiB of CPU random numbers made for real: a memory error, not a template
        return [torch.rand(1 << 20, 1 << 20), torch.randn(3, 5, dtype=torch.bfloat16), 7, 0.5, None]

    made = draws.templates_of(get_inputs)
    assert [x.is_meta for x in made[:2]] == [True, True]
    specs, fixed, values = draws.input_specs(made)
    assert [(s.kind, s.shape, s.dtype) for s in specs[:2]] == [("random", [1 << 20, 1 << 20], "float32"),
                                                                ("random", [3, 5], "bfloat16")]
    assert fixed == {} and values == {2: 7, 3: 0.5, 4: None}


def test_the_specs_from_meta_templates_are_those_of_the_real_inputs():
    def get_inputs():
        return [torch.rand(16, 8), torch.randn(2, 3, 4).half(), 4]

    real = draws.input_specs(get_inputs())
    meta = draws.input_specs(draws.templates_of(get_inputs))
    assert meta[0] == real[0] and meta[2] == real[2] and meta[1] == real[1] == {}


def test_inputs_whose_values_could_be_read_are_made_for_real():
    calls = []

    def indices():  # an integer tensor is a fixed input: its values are shipped as they are
        calls.append("indices")
        return [torch.rand(4, 4), torch.arange(5)]

    made = draws.templates_of(indices)
    assert calls == ["indices", "indices"] and not any(x.is_meta for x in made)
    specs, fixed, _ = draws.input_specs(made)
    assert [s.kind for s in specs] == ["random", "tensor"] and torch.equal(fixed[1], torch.arange(5))

    def read_value():  # a value read from a tensor fails on meta
        x = torch.rand(4)
        return [x, int((x > 2).sum().item()) + 3]

    made = draws.templates_of(read_value)
    assert not made[0].is_meta and made[1] == 3

    def nested():  # a container could hold a tensor whose values are used
        return [torch.rand(2, 2), [torch.ones(2)]]

    made = draws.templates_of(nested)
    assert not made[0].is_meta and not made[1][0].is_meta and torch.equal(made[1][0], torch.ones(2))
