// tiny model tests: filled in with the GPU path
