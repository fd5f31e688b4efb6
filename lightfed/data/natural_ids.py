"""Natural client ids (a writer, a speaker) as integer codes, by a group-by in Arrow."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def natural_id_codes(*columns: pa.Array | pa.ChunkedArray | np.ndarray) -> list[np.ndarray]:
    """Each column's ids as int64 codes into the sorted distinct ids of all the columns together, so that an id has the
    same code in every column (a train and a test split) whatever order its rows come in."""
    arrays = [column if isinstance(column, (pa.Array, pa.ChunkedArray)) else pa.array(column) for column in columns]
    chunks = [chunk for array in arrays for chunk in (array.chunks if isinstance(array, pa.ChunkedArray) else [array])]
    distinct = pc.unique(pa.chunked_array(chunks, type=arrays[0].type))
    distinct = distinct.take(pc.sort_indices(distinct))
    return [
        np.asarray(pc.index_in(array, value_set=distinct).to_numpy(zero_copy_only=False), np.int64) for array in arrays
    ]
