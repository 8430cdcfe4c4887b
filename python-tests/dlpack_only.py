"""A wrapper that speaks only DLPack, through a real producer (NumPy arrays,
pyxbuf exporters): pyxbuf cannot take the classic buffer path with it.
Imported by name (pytest puts this directory on sys.path)."""


class DLPackOnly:
    def __init__(self, obj):
        self.obj = obj

    def __dlpack__(self, **kwargs):
        return self.obj.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.obj.__dlpack_device__()
