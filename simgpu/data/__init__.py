"""Data files for simgpu (GPU catalog, MIG tables); a package so installs ship them."""
