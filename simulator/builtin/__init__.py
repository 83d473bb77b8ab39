"""Installed copies of the preset folders (see setup.cfg package_dir)."""
