// The sandbox's lock-down, run in every fresh context before the user's
// script (executions/javascript.py). V8's memory limit bounds the heap only:
// an ArrayBuffer's bytes (its "backing store") and a WebAssembly memory live
// outside it. So, before any user code runs:
//
// - WebAssembly is removed, and so are the timers (nothing may run after the
//   script has answered);
// - every way to make a backing store goes through a charge against one
//   budget per evaluation: the ArrayBuffer, SharedArrayBuffer and typed
//   array constructors (replaced by proxies that are the only constructors
//   reachable: each prototype's `constructor` names the proxy), and the
//   methods that allocate a new buffer (slice, map, filter, toReversed,
//   toSorted, with, transfer, transferToFixedLength, resize, grow).
//
// A constructor, and a method that takes a new length, is charged before it
// allocates, from arguments read once (a length is converted here and the
// number passed on; a source object is copied into a heap array first, whose
// length cannot lie), so nothing over the budget is ever allocated. A method
// that copies is charged from its result, unless a guarded constructor made
// (and charged) it: it allocates no more than the buffer it copies, which
// was charged already.
//
// `__LIMIT__` is replaced by the budget in bytes.
(function () {
  "use strict";
  const limit = __LIMIT__;
  const G = globalThis;
  const { apply, construct, defineProperty, getOwnPropertyDescriptor, getPrototypeOf } = Reflect;
  const arrayFrom = Array.from, ArrayCtor = Array, NumberCtor = Number, RangeErrorCtor = RangeError;
  const mathTrunc = Math.trunc;
  const made = new WeakSet(), remember = WeakSet.prototype.add, knows = WeakSet.prototype.has;
  let used = 0;

  const charge = (bytes) => {
    if (bytes > 0) {
      if (!(used + bytes <= limit)) {
        throw new RangeErrorCtor(`script exceeded its memory limit (${mathTrunc(limit / 1048576)} MiB) with array buffers`);
      }
      used += bytes;
    }
  };
  // A length as the real constructor reads it (NaN is 0; what is negative or
  // too large the real constructor refuses).
  const toIndex = (value) => (value === undefined ? 0 : mathTrunc(NumberCtor(value)) || 0);
  const lengthGetter = (proto, name) => {
    const found = proto && getOwnPropertyDescriptor(proto, name);
    return found ? found.get : undefined;
  };
  const bufferLengths = [
    lengthGetter(ArrayBuffer.prototype, "byteLength"),
    G.SharedArrayBuffer ? lengthGetter(SharedArrayBuffer.prototype, "byteLength") : undefined,
  ].filter(Boolean);
  const TypedArray = getPrototypeOf(Uint8Array);
  const typedByteLength = lengthGetter(TypedArray.prototype, "byteLength");
  // The bytes a value holds if it is a real buffer or typed array (internal
  // slots, not properties a script can fake), else undefined.
  const bytesOf = (value) => {
    for (const getter of [...bufferLengths, typedByteLength]) {
      try {
        return apply(getter, value, []);
      } catch (notThatKind) { /* try the next kind */ }
    }
    return undefined;
  };
  const isBuffer = (value) => bufferLengths.some((getter) => {
    try { apply(getter, value, []); return true; } catch (notABuffer) { return false; }
  });
  const lock = (object, name, value) => {
    defineProperty(object, name, { value, writable: false, enumerable: false, configurable: false });
  };
  const guard = (Real, argsFor) => {
    const proxy = new Proxy(Real, {
      construct(target, args, newTarget) {
        const created = construct(target, argsFor(args), newTarget === proxy ? target : newTarget);
        apply(remember, made, [created]);
        return created;
      },
    });
    lock(Real.prototype, "constructor", proxy);
    lock(G, Real.name, proxy);
    return proxy;
  };
  const chargedResult = (proto, name) => {
    const real = proto[name];
    if (typeof real !== "function") return;
    lock(proto, name, {
      [name](...args) {
        const result = apply(real, this, args);
        if (!apply(knows, made, [result])) charge(bytesOf(result) || 0);
        return result;
      },
    }[name]);
  };

  // Buffers: (length, options) with options.maxByteLength for a resizable one.
  const bufferArgs = (args) => {
    const length = toIndex(args[0]);
    charge(length);
    if (args[1] !== null && typeof args[1] === "object" && args[1].maxByteLength !== undefined) {
      return [length, { maxByteLength: toIndex(args[1].maxByteLength) }];
    }
    return [length];
  };
  for (const name of ["ArrayBuffer", "SharedArrayBuffer"]) {
    const Real = G[name];
    if (!Real) continue;
    guard(Real, bufferArgs);
    chargedResult(Real.prototype, "slice");
    // resize and grow charge what they add; transfer allocates the whole new length.
    for (const [method, adds] of [["resize", true], ["grow", true], ["transfer", false], ["transferToFixedLength", false]]) {
      const real = Real.prototype[method];
      if (typeof real !== "function") continue;
      lock(Real.prototype, method, {
        [method](newLength) {
          const before = bytesOf(this) || 0;
          const length = newLength === undefined ? before : toIndex(newLength);
          charge(adds ? length - before : length);
          return apply(real, this, [length]);
        },
      }[method]);
    }
  }

  // Typed arrays: (length) allocates; (buffer, offset, length) views a buffer
  // already charged; (object) copies an array-like or an iterable.
  for (const name of ["Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array",
    "Uint32Array", "Float16Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array"]) {
    const Real = G[name];
    if (!Real) continue;
    const size = Real.BYTES_PER_ELEMENT;
    guard(Real, (args) => {
      const source = args[0];
      if (source === null || (typeof source !== "object" && typeof source !== "function")) {
        const length = toIndex(source);
        charge(length * size);
        return [length];
      }
      if (isBuffer(source)) return args;
      const items = apply(arrayFrom, ArrayCtor, [source]);
      charge(items.length * size);
      return [items];
    });
  }
  for (const method of ["slice", "map", "filter", "toReversed", "toSorted", "with"]) {
    chargedResult(TypedArray.prototype, method);
  }
  // TypedArray.from and .of construct through `this`: a guarded constructor.

  delete G.WebAssembly;
  for (const name of ["setTimeout", "clearTimeout", "__timer_manager"]) {
    if (name in G) {
      try { G[name] = undefined; } catch (readOnly) { /* not there to call anyway */ }
    }
  }
})();
