// A device function shipped as prebuilt PTX: saxpy.ptx is generated from this file by
// make_ptx.py (NVRTC, relocatable device code, target sm_80 so it runs on sm_80 and newer).
extern "C" __device__ float saxpy(float a, float x, float y) {
    return fmaf(a, x, y);
}
