#!/bin/sh
# Packs a dataset folder built by tinyrec-data (DIR with train/ and identifiers.json) into one seed
# for the dataset fuzz target (tests/fuzz/fuzz_dataset.c): its files in the target's order, each
# followed by the separator line.  tests/fuzz/pack_dataset.sh DIR > tests/fuzz/corpus_dataset/NAME
set -eu
D=$1
for f in train/dataset.json train/all__inputs.npy train/all__labels.npy train/all__puzzle_identifiers.npy \
         train/all__puzzle_indices.npy train/all__group_indices.npy identifiers.json; do
    cat "$D/$f"
    printf '\n@@@\n'
done
