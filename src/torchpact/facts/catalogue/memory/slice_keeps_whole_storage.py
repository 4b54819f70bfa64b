CLAIM = ("A small slice of a big tensor keeps the whole storage alive; `.clone()` of the slice keeps "
         "only its own elements.")
EXPECTED = "true"


def run() -> str:
    import torch

    big = torch.zeros(1000, 1000)
    row = big[0]
    print(f"big: {big.untyped_storage().nbytes()} bytes")
    print(f"big[0] holds a storage of {row.untyped_storage().nbytes()} bytes")
    print(f"big[0].clone() holds a storage of {row.clone().untyped_storage().nbytes()} bytes")
    kept = row.untyped_storage().nbytes() == big.untyped_storage().nbytes()
    return "true" if kept and row.clone().untyped_storage().nbytes() == 4000 else "false"
