"""The CPU target's kernels: the shared Numba drivers its generated code calls by name
(`cuvil.targets.cpu.helpers` lists them), and the int8 packing its recipes use. Each is a
`numba_cache` driver, compiled once per installation and cached on disk."""
