#!/usr/bin/python3
"""Writes fixtures.safetensors: small tensors in each quantized layout with their expected decode.

An independent NumPy implementation of docs/formats.md sections 3-5 (it shares no code with the
C loader). For each case NAME the file holds the layout's keys, `NAME.source` (the f32 values
that were quantized, for the C quantizers to match) and `NAME.expect` (the decode, computed here
in float64 from the stored bytes). Run: /usr/bin/python3 make_fixtures.py (needs python3-numpy).
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NF2 = np.array([-1.5104, -0.4528, 0.4528, 1.5104], dtype=np.float32)
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)


def hadamard(n):
    """Sylvester matrix by its closed form: H[i][j] = (-1)^popcount(i & j)."""
    i = np.arange(n)
    bits = np.bitwise_and.outer(i, i)
    par = np.zeros_like(bits)
    while bits.any():
        par ^= bits & 1
        bits >>= 1
    return np.where(par == 1, -1.0, 1.0)


def nearest(values, table):
    return np.abs(values[..., None].astype(np.float32) - table).argmin(axis=-1)


def nf2(name, w, gs, np2):
    g = w.astype(np.float32).reshape(-1, gs)
    s = np.maximum(np.sqrt((g.astype(np.float64) ** 2).mean(axis=1)), 1e-8).astype(np.float32)
    u = np.zeros((g.shape[0], np2), np.float64)
    u[:, :gs] = g / s[:, None]
    h = hadamard(np2) / np.sqrt(np2)
    rot = (u @ h.T)[:, :gs].astype(np.float32)
    codes = nearest(rot, NF2)
    packed = np.zeros((g.shape[0], gs // 4), np.uint8)
    for i in range(4):
        packed |= (codes[:, i::4] << (2 * i)).astype(np.uint8)
    s16 = s.astype(np.float16)
    # decode from the stored bytes: codes back out of the bytes, zero-padded, transformed
    back = np.stack([(packed >> (2 * i)) & 3 for i in range(4)], axis=-1).reshape(-1, gs)
    vals = np.zeros((g.shape[0], np2))
    vals[:, :gs] = NF2[back]
    expect = (vals @ h.T)[:, :gs] * s16.astype(np.float64)[:, None]
    shape = list(w.shape) + [0] * (4 - w.ndim)
    return {f"{name}.packed": packed.reshape(-1), f"{name}.scales": s16,
            f"{name}.shape": np.array(shape, np.int64), f"{name}.gs": np.array([gs], np.int64),
            f"{name}.np2": np.array([np2], np.int64), f"{name}.numel": np.array([w.size], np.int64)}, expect


def int4(name, w, gs):
    g = w.astype(np.float32).reshape(-1, gs)
    s16 = (np.maximum(np.abs(g).max(axis=1), 1e-8) / 7).astype(np.float16)
    q = np.clip(np.round(g / s16.astype(np.float32)[:, None]), -8, 7).astype(np.int64) + 8
    q = q.reshape(-1)
    packed = (q[0::2] | (q[1::2] << 4)).astype(np.uint8)
    lo, hi = packed & 15, packed >> 4
    back = np.stack([lo, hi], axis=-1).reshape(-1, gs).astype(np.float64) - 8
    expect = back * s16.astype(np.float64)[:, None]
    return {name: packed, f"{name}.__scales__": s16, f"{name}.__shape__": np.array(w.shape, np.int64),
            f"{name}.__numel__": np.array([w.size], np.int64)}, expect


def dynamic_map():
    vals = [0.0, 1.0]
    for i in range(7):
        edges = np.linspace(0.1, 1.0, 2 ** i + 1)
        mids = (edges[:-1] + edges[1:]) / 2 * 10.0 ** (i - 6)
        vals += list(mids) + list(-mids)
    return np.array(sorted(vals), np.float32)


def nf4(name, w, bs, nested_bs):
    g = w.astype(np.float32).reshape(-1, bs)
    absmax = np.maximum(np.abs(g).max(axis=1), 1e-12).astype(np.float32)
    codes = nearest(g / absmax[:, None], NF4).reshape(-1)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).reshape(-1, 1)
    state = {"quant_type": "nf4", "blocksize": bs, "dtype": "bfloat16", "shape": list(w.shape)}
    keys = {name: packed, f"{name}.quant_map": NF4}
    if nested_bs:
        offset = np.float32(absmax.mean())
        a = absmax - offset
        nb = -(-a.size // nested_bs)
        pad = np.zeros(nb * nested_bs, np.float32)
        pad[:a.size] = a
        nested = np.maximum(np.abs(pad.reshape(nb, nested_bs)).max(axis=1), 1e-12).astype(np.float32)
        dmap = dynamic_map()
        acode = nearest(pad.reshape(nb, nested_bs) / nested[:, None], dmap).reshape(-1)[:a.size]
        used = dmap[acode].astype(np.float64) * nested[np.arange(a.size) // nested_bs] + float(offset)
        state.update(nested_blocksize=nested_bs, nested_dtype="float32", nested_offset=float(offset))
        keys.update({f"{name}.absmax": acode.astype(np.uint8), f"{name}.nested_absmax": nested,
                     f"{name}.nested_quant_map": dmap})
    else:
        used = absmax.astype(np.float64)
        keys[f"{name}.absmax"] = absmax
    keys[f"{name}.quant_state.bitsandbytes__nf4"] = np.frombuffer(json.dumps(state).encode(), np.uint8)
    hi, lo = packed.reshape(-1) >> 4, packed.reshape(-1) & 15
    back = NF4[np.stack([hi, lo], axis=-1).reshape(-1, bs)].astype(np.float64)
    return keys, back * used[:, None]


DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
          np.dtype(np.uint8): "U8"}


def save(path, tensors):
    """safetensors: 8-byte header length, JSON, data; larger dtypes first keeps offsets aligned."""
    order = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
    header, blobs, off = {}, [], 0
    for k in order:
        b = np.ascontiguousarray(tensors[k]).tobytes()
        header[k] = {"dtype": DTYPES[tensors[k].dtype], "shape": list(tensors[k].shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    rng = np.random.default_rng(20240611)
    cases = [
        ("nf2a.weight", (6, 256), lambda n, w: nf2(n, w, 128, 128)),
        ("nf2b.weight", (4, 192), lambda n, w: nf2(n, w, 96, 128)),   # np2 > gs: zero-padded transform
        ("int4.weight", (8, 128), lambda n, w: int4(n, w, 32)),
        ("blk.self_attn.in_proj.weight", (8, 256), lambda n, w: nf4(n, w, 64, 8)),  # nested, 4 nested blocks
        ("nf4f.weight", (4, 128), lambda n, w: nf4(n, w, 64, 0)),    # f32 absmax
    ]
    out = {}
    for name, shape, fn in cases:
        w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        keys, expect = fn(name, w)
        out.update(keys)
        out[f"{name}.source"] = w
        out[f"{name}.expect"] = expect.reshape(shape).astype(np.float32)
    save(os.path.join(HERE, "fixtures.safetensors"), out)


if __name__ == "__main__":
    main()
