"""The resource check's reading of ptxas advisories: both of ptxas's wordings
("in the function", "for the function") are caught and named by tile, a known
advisory of a tile is printed and does not fail, and any other does.

Usage: python3 test_check_kernel_resources.py   (ctest runs it)
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_kernel_resources as crc  # noqa: E402

FUNCTION = ("_ZN6fp4moe7kernels60_GLOBAL__N__47a889ca_27_fp4_grouped_gemm_ws_sm90_cu_1b718c7926"
            "fp4_grouped_gemm_ws_kernelILi{tile}ELNS0_6detail16EpilogueInstanceE{inst}EEEvNS3_12KernelParamsENS3_10TensorMapsE")
C7512 = ("ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
         "insufficient register resources for the function '{f}'")
C7513 = "ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized in the function '{f}'"


class Advisories(unittest.TestCase):
    def test_both_wordings_name_the_tile_and_instance(self):
        a = crc.parse_advisory(C7512.format(f=FUNCTION.format(tile=34, inst=1)))
        self.assertIsNotNone(a)
        self.assertEqual(a[0], "C7512")
        self.assertEqual((a[2], a[3]), (34, 1))
        b = crc.parse_advisory(C7513.format(f=FUNCTION.format(tile=7, inst=0)))
        self.assertIsNotNone(b)
        self.assertEqual((b[0], b[2], b[3]), ("C7513", 7, 0))
        self.assertIsNone(crc.parse_advisory("ptxas info    : Used 96 registers, used 1 barriers"))

    def test_the_rounded_fold_is_its_own_instance(self):
        # the warp-specialized kernels' third template argument: e4m3 tiles of NVFP4 weights
        rounded = FUNCTION.replace("EpilogueInstanceE{inst}E", "EpilogueInstanceE{inst}ELb{r}E")
        for inst, r, want in ((0, 0, 0), (1, 0, 1), (0, 1, 2), (1, 1, 3)):
            a = crc.parse_advisory(C7513.format(f=rounded.format(tile=43, inst=inst, r=r)))
            self.assertEqual((a[2], a[3]), (43, want))
            self.assertEqual(crc.INSTANCES[want], crc.INSTANCES[inst] + (" rounded" if r else ""))

    def test_only_a_listed_tile_and_code_is_known(self):
        name = "bm256_nt128_bk128_mt1_c1_ws_w16"
        self.assertIn((name, "C7512"), crc.KNOWN_ADVISORIES)
        names = {34: name, 35: "some_other_tile"}
        found = [("ws.cu", *crc.parse_advisory(C7512.format(f=FUNCTION.format(tile=34, inst=0))))]
        known, failures = crc.judge_advisories(found, names)
        self.assertEqual(len(known), 1)
        self.assertIn(name, known[0])
        self.assertEqual(failures, [])
        # the same advisory on another tile, and another code on the listed tile, fail
        other_tile = [("ws.cu", *crc.parse_advisory(C7512.format(f=FUNCTION.format(tile=35, inst=0))))]
        other_code = [("ws.cu", *crc.parse_advisory(C7513.format(f=FUNCTION.format(tile=34, inst=0))))]
        for found in (other_tile, other_code):
            known, failures = crc.judge_advisories(found, names)
            self.assertEqual(known, [])
            self.assertEqual(len(failures), 1)
            self.assertIn("ptxas performance advisory", failures[0])


if __name__ == "__main__":
    unittest.main()
