"""The Starlette application behind `voxline serve`."""
