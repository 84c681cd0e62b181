"""Model converters run by `voxline models fetch`: conversion-only code, never imported at serve time."""
