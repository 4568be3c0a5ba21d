"""The DWARF codes the resolver reads: unit types, tags and attributes, with where the spec defines them.

Only the codes that names, lines, address ranges and inlined calls need are listed; a DIE's other
attributes are decoded (their sizes must be known to step over them) but never interpreted.
"""

from __future__ import annotations

# Unit header unit_type (DWARF 5, section 7.5.1, table 7.2)
DW_UT_compile, DW_UT_type, DW_UT_partial, DW_UT_skeleton = 0x01, 0x02, 0x03, 0x04
DW_UT_split_compile, DW_UT_split_type = 0x05, 0x06
#: unit types whose DIEs describe code in this file (type units describe types). A skeleton unit
#: (-gsplit-dwarf) keeps only the unit's address ranges and line table here, its other DIEs being in a .dwo
#: file the resolver does not read: its addresses get lines, and names from the symbol table.
CODE_UNIT_TYPES = frozenset((DW_UT_compile, DW_UT_partial, DW_UT_skeleton))

# Tags (DWARF 5, section 7.5.3, table 7.3)
DW_TAG_class_type = 0x02
DW_TAG_lexical_block = 0x0B
DW_TAG_structure_type = 0x13
DW_TAG_union_type = 0x17
DW_TAG_inlined_subroutine = 0x1D
DW_TAG_module = 0x1E
DW_TAG_catch_block = 0x25
DW_TAG_subprogram = 0x2E
DW_TAG_try_block = 0x32
DW_TAG_interface_type = 0x38
DW_TAG_namespace = 0x39

#: DW_AT_language values of C++ units (DWARF 5, section 7.12, table 7.17: C++, C++03, C++11, C++14; the
#: C++17/20 codes are DWARF 6 proposals gcc 14 does not emit)
DW_LANG_CPLUSPLUS = frozenset((0x04, 0x19, 0x1A, 0x21))

# Attributes (DWARF 5, section 7.5.4, table 7.5; DW_AT_MIPS_linkage_name from binutils' dwarf2.def, the
# pre-DWARF-4 spelling of DW_AT_linkage_name that gcc and rustc still emit in some modes)
DW_AT_sibling = 0x01
DW_AT_name = 0x03
DW_AT_language = 0x13
DW_AT_stmt_list = 0x10
DW_AT_low_pc = 0x11
DW_AT_high_pc = 0x12
DW_AT_comp_dir = 0x1B
DW_AT_abstract_origin = 0x31
DW_AT_decl_file = 0x3A
DW_AT_decl_line = 0x3B
DW_AT_specification = 0x47
DW_AT_ranges = 0x55
DW_AT_call_file = 0x58
DW_AT_call_line = 0x59
DW_AT_linkage_name = 0x6E
DW_AT_str_offsets_base = 0x72
DW_AT_addr_base = 0x73
DW_AT_rnglists_base = 0x74
DW_AT_MIPS_linkage_name = 0x2007
