# Sourced by the device scripts (benchmarks/*.sh):
# `write_versions PYTHON FILE` records the Python, torch, CUDA and Triton versions a result was
# measured with, one line, beside it (the device copy of the tree carries no other record).
write_versions() {
  "$1" -c "import platform, torch, triton; print(platform.python_version(), torch.__version__,
torch.version.cuda, triton.__version__)" > "$2" 2>&1
}
