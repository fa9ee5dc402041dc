import re
import os
md=open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../shared/research/zab.md')).read().split('\n')
def table_after(title_re):
    for i,l in enumerate(md):
        if re.search(title_re,l):
            j=i+1
            while not md[j].startswith('|'): j+=1
            rows=[]
            while j<len(md) and md[j].startswith('|'):
                cells=[c.strip() for c in md[j].strip('|').split('|')]
                rows.append(cells); j+=1
            return rows[0],rows[2:]
    raise Exception(title_re)
def pct(c):
    c=c.strip().rstrip('%')
    return float(c)
NaN='f64::NAN'
def grid8(title, cols):  # returns dict name->[[4]*10]
    h,rows=table_after(title)
    out={}
    for name,idx in cols.items():
        g=[]
        for r in rows:
            g.append([ (pct(r[i]) if i is not None else None) for i in idx])
        out[name]=g
    return out
def fmt(g):
    return '[' + ', '.join('[' + ', '.join(('f64::NAN' if v is None else repr(float(v)))  for v in row) + ']' for row in g) + ']'
lat=[];thr=[];acks=[];ps=[]
L=[1,2,3,4];T=[5,6,7,8]
# Table 5.1
h,rows=table_after(r'\*\*Table 5\.1 ')
lat.append(('zab-ac',False,[[pct(r[1]),None,None,None] for r in rows]))
thr.append(('zab-ac',False,[[pct(r[2]),None,None,None] for r in rows]))
for t,proto,wait in [('E\\.1','zab-aa-restricted',False),('E\\.2','zab-ct-restricted',False),('E\\.3','zab-aa',False),('E\\.4','zab-ct-half',False),('E\\.5','zab-ct',False),('E\\.6','zab-ct',True),('E\\.8','zab-ct-a',False),('E\\.9','zab-ct-a',True),('E\\.11','zab-ct-aa',False),('E\\.12','zab-ct-aa',True)]:
    h,rows=table_after(r'\*\*Table %s '%t)
    lat.append((proto,wait,[[pct(r[i]) for i in L] for r in rows]))
    thr.append((proto,wait,[[pct(r[i]) for i in T] for r in rows]))
h,rows=table_after(r'\*\*Table D\.3 ')
lat.append(('zab-ct-optimal',False,[[pct(r[i]) for i in L] for r in rows]))
lat.append(('zab-ct-optimal',True,[[pct(r[i]) for i in T] for r in rows]))
for t,proto,wait in [('5\\.2','zab-ct',False),('E\\.7','zab-ct',True),('5\\.3','zab-ct-a',False),('E\\.10','zab-ct-a',True),('E\\.13','zab-ct-aa',False),('E\\.14','zab-ct-aa',True),('D\\.1','zab-ct-optimal',False),('D\\.2','zab-ct-optimal',True)]:
    h,rows=table_after(r'\*\*Table %s '%t)
    acks.append((proto,wait,[[pct(r[i]) for i in L] for r in rows]))
    ps.append((proto,wait,[[pct(r[i]) for i in T] for r in rows]))
# App F compact
lam=[];dd=[]
for title,proto,wait in [(r'\*\*ZabCT_u, zero wait-time \(F','zab-ct',False),(r'\*\*ZabCT_u, wait-time','zab-ct',True),(r'\*\*ZabCT_a, zero wait-time \(F','zab-ct-a',False),(r'\*\*ZabCT_a, wait-time','zab-ct-a',True),(r'\*\*ZabCT_aa, zero wait-time \(F','zab-ct-aa',False),(r'\*\*ZabCT_aa, wait-time','zab-ct-aa',True)]:
    h,rows=table_after(title)
    gl=[];gd=[]
    for r in rows:
        cl=[];cd=[]
        for c in r[1:5]:
            parts=[x.strip() for x in c.split(';')]
            cl.append(float(parts[0])); cd.append(float(parts[1])*1000)
        gl.append(cl);gd.append(cd)
    lam.append((proto,wait,gl));dd.append((proto,wait,gd))
def emit(name,doc,items):
    s='/// %s\npub const %s: &[(&str, bool, Grid)] = &[\n'%(doc,name)
    for p,w,g in items:
        s+='    ("%s", %s, %s),\n'%(p,'true' if w else 'false',fmt(g))
    return s+'];\n\n'
# One file per kind of table (gains over Zab, the coin, App. F's measured inputs), and a module
# that names the grid type. Run from the repository root; `cargo fmt` lays the output out.
import os, sys
root = sys.argv[1] if len(sys.argv) > 1 else '.'
d = os.path.join(root, 'crates/synod/src/experiment/thesis_data')
os.makedirs(d, exist_ok=True)
head = lambda what: ("//! %s ([T], as extracted in ../shared/research/zab.md §8.6), generated from\n"
    "//! that file's tables by scripts/thesis_data.py and kept verbatim.\n\nuse super::Grid;\n\n" % what)
open(os.path.join(d, 'mod.rs'), 'w').write('''//! The thesis's reported figures, generated from ../shared/research/zab.md by
//! scripts/thesis_data.py: rows are WR = 10 … 100 %, columns N = 3, 5, 7, 9; NaN where the
//! thesis reports nothing. Each entry is (protocol, with the (25, 75) ms wait-time, grid).

mod app_f;
mod coin;
mod gains;

pub use app_f::{D_MS, LAMBDA};
pub use coin::{ACKS, COIN_P};
pub use gains::{LATENCY, THROUGHPUT};

/// Rows WR = 10, 20, …, 100 %; columns N = 3, 5, 7, 9.
pub type Grid = [[f64; 4]; 10];
''')
open(os.path.join(d, 'gains.rs'), 'w').write(head('Improvements over Zab')
    + emit('LATENCY','Latency improvement over Zab, % (Tables 5.1, E.1–E.6, E.8, E.9, E.11, E.12, D.3).',lat)
    + emit('THROUGHPUT','Throughput improvement over Zab, % (Tables 5.1, E.1–E.6, E.8, E.9, E.11, E.12).',thr).rstrip('\n') + '\n')
open(os.path.join(d, 'coin.rs'), 'w').write(head("ZabCT's coin: acks per commit and p")
    + emit('ACKS','Follower acks received by the leader per commit (Tables 5.2, 5.3, E.7, E.10, E.13, E.14, D.1, D.2).',acks)
    + emit('COIN_P','The coin probability p; 1 = infeasible, Zab ran (same tables).',ps).rstrip('\n') + '\n')
open(os.path.join(d, 'app_f.rs'), 'w').write(head("The followers' measured inputs (App. F)")
    + emit('LAMBDA','λ, abcasts per second measured by followers (App. F, compact form of zab.md §8.6.6).',lam)
    + emit('D_MS','d, the leader → follower delay, in ms (App. F).',dd).rstrip('\n') + '\n')
