from engine.trainer.balance import balanced_order


def test_balanced_order_is_a_permutation_with_even_loads():
    lengths = [10, 9, 8, 7, 1, 2, 3, 4]  # split in order: 34 tokens vs 10
    order = balanced_order(lengths, 2)
    assert sorted(order) == list(range(8))
    first, second = order[:4], order[4:]
    loads = sum(lengths[i] for i in first), sum(lengths[i] for i in second)
    assert loads == (22, 22)
    assert balanced_order([5, 5, 5], 1) == [0, 1, 2]


def test_uneven_rows_keep_chunk_sizes():
    lengths = [100, 1, 1, 1, 1]
    order = balanced_order(lengths, 2)
    # Batch.chunk(2) cuts 2 + 3 rows: the long row must be alone with one short row in the 2-row part
    assert len(order) == 5 and 0 in order[:2]
