"""The JavaScript sandbox's memory bound holds for everything a script can
allocate: the V8 heap, and the array buffers and WebAssembly memories that
live outside it (executions/sandbox.js). Scripts run in SWITCH and DO_WHILE
conditions (inside an API request or a decider) and in INLINE and HTTP_POLL
tasks (in a runner): none of them may grow its process past the limit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from executions import javascript
from tests.procs.stack import ROOT

MiB = 1024 * 1024
LIMIT = 16 * MiB

# Every way we know to make a backing store, each asking for far more than
# the limit, directly or a piece at a time.
OVER_THE_LIMIT = {
    "an ArrayBuffer": "new ArrayBuffer(512 * 1024 * 1024).byteLength",
    "a typed array of a length": "new Uint8Array(512 * 1024 * 1024).length",
    "a wide typed array": "new Float64Array(64 * 1024 * 1024).length",
    "a BigInt typed array": "new BigUint64Array(64 * 1024 * 1024).length",
    "a SharedArrayBuffer": "new SharedArrayBuffer(512 * 1024 * 1024).byteLength",
    "many small buffers": "const k = []; for (let i = 0; i < 100; i++) k.push(new ArrayBuffer(1024 * 1024)); k.length",
    "slices of a buffer": "const a = new ArrayBuffer(4 * 1024 * 1024); const k = [];"
    " for (let i = 0; i < 64; i++) k.push(a.slice(0)); k.length",
    "typed slices": "const a = new Uint8Array(4 * 1024 * 1024); const k = [];"
    " for (let i = 0; i < 64; i++) k.push(a.slice()); k.length",
    "slices made by the intrinsic (species removed)": "const a = new Uint8Array(4 * 1024 * 1024); a.constructor = undefined; const k = [];"
    " for (let i = 0; i < 64; i++) k.push(a.slice()); k.length",
    "copies by toReversed": "const a = new Uint8Array(4 * 1024 * 1024); const k = [];"
    " for (let i = 0; i < 64; i++) k.push(a.toReversed()); k.length",
    "copies by map": "const a = new Uint8Array(4 * 1024 * 1024); const k = [];"
    " for (let i = 0; i < 64; i++) k.push(a.map(x => x)); k.length",
    "a resizable buffer resized": "const a = new ArrayBuffer(1, {maxByteLength: 1024 * 1024 * 1024});"
    " a.resize(512 * 1024 * 1024); a.byteLength",
    "a growable shared buffer grown": "const a = new SharedArrayBuffer(1, {maxByteLength: 1024 * 1024 * 1024});"
    " a.grow(512 * 1024 * 1024); a.byteLength",
    "a transfer to a larger length": "new ArrayBuffer(1).transfer(512 * 1024 * 1024).byteLength",
    "a subclass": "class Big extends Uint8Array {}; new Big(512 * 1024 * 1024).length",
    "the constructor read back from an instance": "const C = Object.getPrototypeOf(new Uint8Array(1)).constructor; new C(512 * 1024 * 1024).length",
    "Reflect.construct": "Reflect.construct(Uint8Array, [512 * 1024 * 1024]).length",
    "a bound constructor": "new (Uint8Array.bind(null))(512 * 1024 * 1024).length",
    "TypedArray.from": "Uint8Array.from({length: 512 * 1024 * 1024}).length",
}

# Arguments whose second reading would differ from the first: the sandbox
# reads each once and passes the number on, so the small first answer holds.
READ_ONCE = {
    "a length whose valueOf changes": "let c = 0; const n = {valueOf() { return c++ ? 512 * 1024 * 1024 : 1 }};"
    " new ArrayBuffer(n).byteLength",
    "an array-like whose length changes": "let c = 0; const src = {get length() { return c++ ? 512 * 1024 * 1024 : 1 }};"
    " new Uint8Array(src).length",
}

WITHIN_THE_LIMIT = {
    "a small typed array, mapped": ("new Uint8Array([1, 2, 3]).map(x => x * 2).join(',')", "2,4,6"),
    "a view on a buffer": (
        "const b = new ArrayBuffer(16); new DataView(b).setInt8(0, 5); new Int8Array(b, 0, 4)[0]",
        5,
    ),
    "a subarray": ("new Uint8Array([1, 2, 3, 4]).subarray(1, 3).length", 2),
    "a typed array copied from another": ("Array.from(new Float64Array(new Uint8Array([1, 2])))", [1, 2]),
    "a buffer of half the limit": ("new ArrayBuffer(8 * 1024 * 1024).byteLength", 8 * MiB),
    "a buffer resized within the limit": (
        "const a = new ArrayBuffer(1, {maxByteLength: 1024}); a.resize(1000); a.byteLength",
        1000,
    ),
    "a subclass within the limit": ("class Small extends Uint8Array {}; new Small(4).length", 4),
    "TypedArray.of": ("Array.from(Int16Array.of(1, 2, 3))", [1, 2, 3]),
}


def run(code: str):
    return javascript.evaluate(code, {}, javascript.Limits(timeout_s=5, max_memory=LIMIT))


@pytest.mark.parametrize("code", OVER_THE_LIMIT.values(), ids=OVER_THE_LIMIT.keys())
def test_it_refuses_array_buffers_past_the_memory_limit(code):
    with pytest.raises(javascript.ScriptError, match=r"memory limit \(16 MiB\)"):
        run(code)


@pytest.mark.parametrize("code", READ_ONCE.values(), ids=READ_ONCE.keys())
def test_it_reads_each_length_once(code):
    assert run(code) == 1


@pytest.mark.parametrize(("code", "expected"), WITHIN_THE_LIMIT.values(), ids=WITHIN_THE_LIMIT.keys())
def test_it_lets_scripts_use_array_buffers_within_the_limit(code, expected):
    assert run(code) == expected


def test_a_refused_allocation_costs_nothing_of_the_budget():
    script = (
        "let refused = false; try { new ArrayBuffer(64 * 1024 * 1024) } catch (e) { refused = e instanceof RangeError };"
        " [refused, new ArrayBuffer(12 * 1024 * 1024).byteLength]"
    )
    assert run(script) == [True, 12 * MiB]


def test_the_budget_is_per_evaluation():
    for _ in range(3):
        assert run("new ArrayBuffer(12 * 1024 * 1024).byteLength") == 12 * MiB


@pytest.mark.parametrize("name", ["WebAssembly", "setTimeout", "clearTimeout"])
def test_it_offers_no_webassembly_and_no_timers(name):
    assert run(f"typeof {name}") == "undefined"


def test_a_script_cannot_put_the_real_constructors_back():
    script = (
        "try { delete globalThis.ArrayBuffer; Object.defineProperty(Uint8Array.prototype, 'constructor', {value: 1}) }"
        " catch (e) {}; new Uint8Array(1).constructor === Uint8Array"
    )
    assert run(script) is True


def test_the_process_does_not_grow_past_the_limit():
    # In a fresh interpreter, so the peak resident size measures these
    # scripts alone: each would have taken 512 MiB before the lock-down.
    attacks = [
        OVER_THE_LIMIT[name]
        for name in (
            "an ArrayBuffer",
            "a typed array of a length",
            "a SharedArrayBuffer",
            "a resizable buffer resized",
            "a transfer to a larger length",
        )
    ]
    attacks.append("new WebAssembly.Memory({initial: 8192}).buffer.byteLength")
    program = f"""
import json, os, resource, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodeflow.settings")
import django; django.setup()
from executions import javascript
javascript.evaluate("1", {{}})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
refused = 0
for code in json.loads(sys.argv[1]):
    try:
        javascript.evaluate(code + "; new Uint8Array(1).fill(1)", {{}}, javascript.Limits(timeout_s=5, max_memory={LIMIT}))
    except javascript.ScriptError:
        refused += 1
print(json.dumps({{"refused": refused, "grew_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", program, json.dumps(attacks)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["refused"] == len(attacks)
    assert figures["grew_kib"] < 64 * 1024, figures
