CLAIM = "`torch.compile`'s default mode uses CUDA graphs."
EXPECTED = "false"


def run() -> str:
    from torch._inductor import config, list_mode_options

    modes = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
    uses = {}
    for mode in modes:
        options = list_mode_options(mode)
        uses[mode] = bool(options.get("triton.cudagraphs", config.triton.cudagraphs))
        print(f"mode={mode!r}: options {options}, CUDA graphs: {uses[mode]}")
    print(f"inductor default config.triton.cudagraphs: {config.triton.cudagraphs}")
    return "true" if uses["default"] else "false"
