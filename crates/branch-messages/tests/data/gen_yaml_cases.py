# Records PyYAML 6 output with the reference's minimal-YAML dumper settings
# (lionagi 0.36.0 libs/schema/minimal_yaml.py) for tests/yaml_pyyaml.rs.
import json, yaml
class D(yaml.SafeDumper):
    def ignore_aliases(self, data): return True
def rs(d, s):
    if "\n" in s: return d.represent_scalar("tag:yaml.org,2002:str", s, style="|")
    return d.represent_scalar("tag:yaml.org,2002:str", s)
D.add_representer(str, rs)
def empty(x):
    if x is None: return True
    if isinstance(x,str): return x.strip()==""
    if isinstance(x,(dict,list)): return len(x)==0
    return False
def prune(x):
    if isinstance(x, dict):
        p={k:prune(v) for k,v in x.items() if not empty(v)}
        return {k:v for k,v in p.items() if not empty(v)}
    if isinstance(x, list):
        p=[prune(v) for v in x if not empty(v)]
        return [v for v in p if not empty(v)]
    return x
def my(v): return yaml.dump(prune(v), Dumper=D, default_flow_style=False, sort_keys=False, allow_unicode=True, indent=2, width=2**31-1)
strings = ["a: b","plain text","- dash","-dash","-","?","? q",":x","x:","x: y","a #b","a#b","#h","'q","\"q","x'y","x\"y","123","1.5","1e5","1.0e+5","yes","no","on","Off","null","Null","~","true","2024-01-01","2024-01-01 10:00:00","1:30","0x1F","017","0b11","héllo","日本語","emoji 😀","tab\tx","cr\rx","bell\x07","nbsp\xa0x","bom\ufeffx","ls\u2028x"," lead","trail ","multi\nline","multi\nline\n","multi\n\n","\nlead break","trail \nspace","x\n y","a\n\nb","---x","...x","--- x","%x","@x","`x","|x",">x","!x","&x","*x","[x","]x","{x","}x",",x","x,y","x[y]","x{y}","x?y","http://a.b/c?d=e#f","<<","=","a: b\nc","~x",".inf",".nan","-.inf","+1","-0","0","00","1_000","1__0","0.","._1",".5","5.","+.5","1:60","1:5","2001-12-14t21:59:43.10-05:00","2001-12-14 21:59:43.10 -5","x"*200, "long: "+"y"*150, "\x85x", "\U0010FFFF", "é\n😀\n"]
cases=[]
for s in strings:
    for v in (s, {"k": s}, [s], {s: 1}, {"k":[s, {"n": s}]}, [[s]]):
        try: out = my(v)
        except Exception as e: continue
        cases.append({"value": v, "yaml": out})
extra = [
 {"Guidance":"a: b","Instruction":"plain text","Context":[0,False,"yes","null","- dash","multi\nline","héllo","#hash","x'y","123",{"nested":{"deep":[1,2]}}]},
 {"a": 0.9, "b": 1e-05, "c": 1e16, "d": 42.0, "e": -0.0, "f": 123456789012345678, "g": 2.5e-300, "h": True, "i": None, "j": "", "k": "  ", "l": [], "m": {}, "n": [None, "", {"x": None}], "o": [[],[1]]},
 {"x": {"y": {"z": [ {"a": [1, [2, 3], {"b": "c\nd"}]} ]}}},
 [[1,[2,[3]]],{"a":[{"b":[{"c":1}]}]}],
 "top", "top\nlevel", 5, 1.5, True, {}, [], {"a": None}, "a: b", "x\n\n",
 {"k": "x\n\n"}, {"k": "x\n\n", "z": 1},
 {"": 1, "1": 2, "null": 3, "a b": 4, "a: b": 5},
 {"multi\nkey": {"a": 1, "b": [1, {"c": "d"}]}, "z": 1}, {"multi\nkey": [1, [2, 3]]}, {"": [1]}, [{"k\nk": {"x": "y\nz"}}], {"w": "a  b", "v": "x\n\n\ny", "u": "  ", "t": "line\n  indented\n"},
]
for v in extra: cases.append({"value": v, "yaml": my(v)})
json.dump(cases, open(__import__("os").path.join(__import__("os").path.dirname(__file__), "yaml_cases.json"),"w"), ensure_ascii=False, indent=0)
print(len(cases))
