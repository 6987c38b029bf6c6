"""File names of the format: which shards a reader uses."""


from comgra_like.format.layout import live_shards


def test_live_shards_skip_what_a_compaction_covers():
    names = ["part-00000000.parquet", "part-00000001.parquet", "compact-00000000-00000001.parquet",
             "part-00000002.parquet", "notes.txt"]
    assert live_shards(names) == ["compact-00000000-00000001.parquet", "part-00000002.parquet"]
    assert live_shards(["compact-00000000-00000001.parquet",
                        "compact-00000000-00000003.parquet"]) == [
        "compact-00000000-00000003.parquet"]
