"""The CPU target's templates: each module's `generate` writes the Numba kernel of one
family of groups (`cuvil.targets.cpu.target` lists them by family)."""
