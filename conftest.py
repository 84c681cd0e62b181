"""pytest puts the folder of a conftest.py outside a package on sys.path, so this file puts the checkout's root
there: the backend tests import the e2e harness and the browser benchmarks (`e2e.harness`, `e2e.bench`) however
pytest is started, not only as `python -m pytest` from the root."""
