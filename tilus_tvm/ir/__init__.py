"""The tile IR: tensors, instructions, functions."""
