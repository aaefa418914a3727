"""wide-unsigned-unpickle: uint16/uint32/uint64 and float8 tensors pickle but don't unpickle.

Tensor.__reduce_ex__ pickles the tensors of the dtypes in torch.storage._new_dtypes() (uint16,
uint32, uint64, the float8 family, and also complex32, float4_e2m1fn_x2 and the bits types) with
their UntypedStorage, which pickles itself through the legacy torch.save format; the legacy loader
then reads storage_type.dtype, which UntypedStorage lacks.  So pickle.loads(pickle.dumps(t))
raises AttributeError, and so does anything that pickles tensors: multiprocessing queues and pipes,
torch.distributed's object collectives, copy.deepcopy through __reduce_ex__ ...

    python docs/findings/wide-unsigned-unpickle.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import pickle
import sys
import traceback

import torch

NAMES = ["uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
         "float8_e8m0fnu"]


def main():
    failed, errors = [], set()
    dtypes = [getattr(torch, name) for name in NAMES if hasattr(torch, name)]
    for dtype in dtypes:
        t = torch.arange(8, dtype=torch.uint8).view(dtype)  # any bytes will do: 8 / itemsize elements
        data = pickle.dumps(t)  # succeeds
        try:
            back = pickle.loads(data)
        except Exception as e:
            failed.append(str(dtype).removeprefix("torch."))
            errors.add(f"{type(e).__name__}: {e}")
            continue
        if back.dtype != dtype or not torch.equal(back.view(torch.uint8), t.view(torch.uint8)):
            failed.append(f"{str(dtype).removeprefix('torch.')} (came back different)")
    if failed:
        print(f"BUG: pickle.loads(pickle.dumps(t)) fails for {', '.join(failed)}: {' | '.join(sorted(errors))}")
        return 1
    print(f"FIXED: tensors of {', '.join(str(d).removeprefix('torch.') for d in dtypes)} pickle and unpickle")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
