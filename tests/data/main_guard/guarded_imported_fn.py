"""Correct: the rank function lives in a separate module (rank_work.py in the
same folder) and is imported here; the script calls launch() only under
`if __name__ == "__main__":`, in a small sweep over world sizes.
"""
# expect: ok
from sandbox import launch

from rank_work import reduce_to_root


def main():
    all_ok = True
    for world_size in (2, 3):
        result = launch(reduce_to_root, world_size=world_size, args=(5,), init=True)
        print(f"world_size={world_size}: {result.verdict} - {result.diagnosis.summary}")
        all_ok = all_ok and result.ok
    return all_ok


if __name__ == "__main__":
    ok = main()
    print(f"RESULT ok={ok}")
